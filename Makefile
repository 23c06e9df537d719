# Two entry points, both self-contained on a fresh clone:
#   make demo   starts a broker on the embedded store and runs a real pipeline end to end
#   make test   runs the whole test suite
# Both create .venv/ and install the pinned dependencies (requirements.lock) first, then the package
# and the benchmarks of other systems (benchmarks/, the kittiwake-benchmarks distribution), both editable.
#   make fuzz   runs each fuzz target for FUZZ_SECS seconds (tests/fuzz/campaign.py)

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
FUZZ_SECS ?= 60
FUZZ_TARGETS ?= frames,requests,request-path,engine-ops

.PHONY: demo test fuzz setup fuse-deps browser-deps clean

setup: fuse-deps browser-deps $(STAMP)

# The power-loss tests mount a FUSE filesystem, which needs fusermount3 and libfuse3 from the
# system's packages. Nothing to do when both are there; installed when missing and this is root
# with apt-get (a failed install stops make); otherwise a notice, and those tests say why they skip.
fuse-deps:
	@if command -v fusermount3 >/dev/null 2>&1 && \
		$(PYTHON) -c "import ctypes.util, sys; sys.exit(not ctypes.util.find_library('fuse3'))"; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		echo "fuse-deps: installing fuse3 and libfuse3-3 with apt-get"; \
		DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends fuse3 libfuse3-3 >/dev/null; \
	else \
		echo "fuse-deps: fuse3 is missing and cannot be installed here (needs root and apt-get);" \
			"the power-loss tests will skip"; \
	fi

# The dashboard's browser tests drive Debian's chromium through Playwright (not Playwright's own
# browser download). Nothing to do when it is there; installed when missing and this is root with
# apt-get (a failed install stops make); otherwise a notice, and those tests say why they skip.
CHROMIUM ?= /usr/bin/chromium
browser-deps:
	@if [ -x "$(CHROMIUM)" ]; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		echo "browser-deps: installing chromium with apt-get"; \
		DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium >/dev/null; \
	else \
		echo "browser-deps: $(CHROMIUM) is missing and cannot be installed here (needs root and apt-get);" \
			"the browser tests will skip"; \
	fi

$(STAMP): pyproject.toml benchmarks/pyproject.toml requirements.lock
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements.lock
	$(PY) -m pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation -e .
	$(PY) -m pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation -e ./benchmarks
	touch $(STAMP)

demo: $(STAMP)
	$(PY) -m kittiwake demo

test: fuse-deps browser-deps $(STAMP)
	$(PY) -m pytest -n 2 --dist loadfile

fuzz: $(STAMP)
	$(PY) tests/fuzz/campaign.py --secs $(FUZZ_SECS) --targets $(FUZZ_TARGETS)

clean:
	rm -rf $(VENV) .kittiwake .pytest_cache .hypothesis
