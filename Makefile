# Two entry points, both self-contained on a fresh clone:
#   make demo   starts a broker on the embedded store and runs a real pipeline end to end
#   make test   runs the whole test suite
# Both create .venv/ and install the pinned dependencies (requirements.lock) first.
#   make fuzz   runs each fuzz target for FUZZ_SECS seconds (tests/fuzz/campaign.py)

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
FUZZ_SECS ?= 60
FUZZ_TARGETS ?= frames,requests,request-path,engine-ops

.PHONY: demo test fuzz setup clean

setup: $(STAMP)

$(STAMP): pyproject.toml requirements.lock
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements.lock
	$(PY) -m pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation -e .
	touch $(STAMP)

demo: $(STAMP)
	$(PY) -m kittiwake demo

test: $(STAMP)
	$(PY) -m pytest

fuzz: $(STAMP)
	$(PY) tests/fuzz/campaign.py --secs $(FUZZ_SECS) --targets $(FUZZ_TARGETS)

clean:
	rm -rf $(VENV) .kittiwake .pytest_cache .hypothesis
