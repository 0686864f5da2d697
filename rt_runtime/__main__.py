"""`python -m rt_runtime` is `rt-runtime`."""
import sys

from rt_runtime.cli import main

sys.exit(main())
