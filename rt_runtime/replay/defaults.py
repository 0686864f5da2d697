"""Where the built-in scenario bag and the default stack configuration live."""
from __future__ import annotations

import os
import sys
from pathlib import Path

DEFAULT_SCENARIO = "highway_cut_in"
DEFAULT_SECONDS = 10.0
DEFAULT_SEED = 7


def cache_dir() -> Path:
    """``$RT_RUNTIME_CACHE``, else ``$XDG_CACHE_HOME/rt_runtime``, else ``~/.cache/rt_runtime``."""
    if os.environ.get("RT_RUNTIME_CACHE"):
        return Path(os.environ["RT_RUNTIME_CACHE"])
    base = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    return base / "rt_runtime"


def config_file(name: str) -> Path:
    """``config/<name>`` of the source tree, else the installed ``share/rt_runtime/config`` copy."""
    for candidate in (Path(__file__).resolve().parents[2] / "config" / name,
                      Path(sys.prefix) / "share" / "rt_runtime" / "config" / name):
        if candidate.is_file():
            return candidate
    raise FileNotFoundError(f"config/{name}: not found in the source tree or share/rt_runtime/config")


def default_config() -> Path:
    """The reference stack's configuration."""
    return config_file("stack.yaml")


def default_bag(progress: bool = False) -> Path:
    """The built-in scenario's bag, generated once into the cache folder."""
    from ..sim import record

    path = cache_dir() / f"{DEFAULT_SCENARIO}_seed{DEFAULT_SEED}_{DEFAULT_SECONDS:g}s"
    if not (path / "metadata.yaml").is_file():
        import shutil

        path.parent.mkdir(parents=True, exist_ok=True)
        for stale in (path, path.with_name(path.name + ".partial")):   # a cache entry that is not a whole bag
            if stale.exists():
                shutil.rmtree(stale)
        print(f"rt-runtime: generating the built-in scenario '{DEFAULT_SCENARIO}' ({DEFAULT_SECONDS:g} s) "
              f"into {path} (once)", file=sys.stderr)
        try:   # written into a temporary sibling and renamed (BagWriter): a whole bag or none, named as its folder
            record(path, DEFAULT_SCENARIO, DEFAULT_SECONDS, DEFAULT_SEED, "mcap", workers=min(os.cpu_count() or 1, 4))
        except FileExistsError:
            if not (path / "metadata.yaml").is_file():   # else another process made it meanwhile
                raise
    return path
