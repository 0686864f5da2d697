# Two commands do everything on a fresh machine: `make demo` and `make test`.
# Both create .venv (Python 3.11) and install the pinned stack into it first.
PYTHON ?= python3.11
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

# Every process that may start DDS stays on this machine, on its own domain.
export ROS_AUTOMATIC_DISCOVERY_RANGE := LOCALHOST
export ROS_DOMAIN_ID ?= 42

.PHONY: install demo test test-stress bench clean crunch

install: $(STAMP) crunch

# The Autoware reference example's workload (examples/autoware_reference), called through ctypes.
CRUNCH := examples/autoware_reference/libcrunch.so
crunch: $(CRUNCH)

$(CRUNCH): examples/autoware_reference/crunch.c
	gcc -O2 -shared -fPIC -o $@ $<

$(STAMP): requirements.txt setup.py
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check -r requirements.txt
	$(PY) -m pip install -q --disable-pip-version-check --no-deps --no-build-isolation -e .
	touch $(STAMP)

demo: install
	$(VENV)/bin/rt-runtime demo

test: install
	$(PY) -m pytest -q

# The wall-clock and ROS tests, 10 runs beside a CPU hog: passes/runs per test.
# Other runs: make test-stress STRESS="--runs 3 --hogs 2 -k ros_e2e" (bench/stress.py --help).
test-stress: install
	$(PY) bench/stress.py $(STRESS)

bench: install
	@set -e; for f in bench/bench_*.py; do echo "== $$f"; $(PY) $$f; done

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache $(CRUNCH)
