# Two entry points, both self-contained on a fresh clone:
#   make demo   starts a broker on the embedded store and runs a real pipeline end to end
#   make test   runs the whole test suite
# Both create .venv/ and install the pinned dependencies (requirements.lock) first.

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp

.PHONY: demo test setup clean

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

clean:
	rm -rf $(VENV) .kittiwake .pytest_cache .hypothesis
