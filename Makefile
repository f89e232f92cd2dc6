# trainmath: `make test` runs every check, `make docs` builds the site. Both set up .venv/.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
LOCK   := requirements/constraints.txt
HTML   := docs/_build/html
PORT   ?= 8000

.PHONY: help test docs preview serve validate published browser browser-tools lock clean

help:
	@echo "make test     run unit tests, every page's examples and claims, and the number lint"
	@echo "make docs     build the site into $(HTML) (warnings are errors)"
	@echo "make preview  serve the built site at http://127.0.0.1:$(PORT)/ (search needs HTTP)"
	@echo "make serve    rebuild and reload the site while you edit"
	@echo "make validate check the library against real PyTorch on the CPU (installs torch)"
	@echo "make published  rank every published run's layout in the planner, as the Plan page records"
	@echo "make browser  the built site in Chromium: popups, axe, weight, search (installs chromium, axe-core)"
	@echo "make lock     regenerate $(LOCK) from the newest compatible releases"

# The project with its `precision` extra, plus the `test` and `docs` dependency groups (PEP 735,
# pyproject.toml) and the claim machinery (tools/mystclaims), all pinned by $(LOCK). pip is
# upgraded first: `--group` needs pip 25.1 or newer.
$(STAMP): pyproject.toml tools/mystclaims/pyproject.toml $(LOCK)
	@echo "Installing the pinned tools into $(VENV)/ (once; pip may print notes of its own)"
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@$(PY) -m pip install --quiet --disable-pip-version-check -c $(LOCK) pip setuptools
	@$(PY) -m pip install --quiet --disable-pip-version-check --no-build-isolation -c $(LOCK) \
		-e '.[precision,plots]' --group test --group docs -e ./tools/mystclaims
	@touch $@

# Every core (pytest-xdist; a file's tests, a page's examples among them, stay on one worker).
test: $(STAMP)
	$(PY) -m pytest -q -n auto --dist loadfile

# Every published run's layout ranked by the planner (about a hundred plans, some 20 s): the
# ranks "Plan a training run" shows are docs/_data/published-ranks.json, which this checks;
# `$(PY) tools/published_ranks.py` rewrites it.
published: $(STAMP)
	$(PY) tools/published_ranks.py --check

# The calculator page's runtime: Pyodide, pinned in tools/calculator/package-lock.json, installed
# by npm ci once (its .package-lock.json is the stamp) and copied into the site by the build.
CALC_NPM := tools/calculator/node_modules/.package-lock.json
$(CALC_NPM): tools/calculator/package-lock.json
	@command -v npm >/dev/null || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "Installing Debian's nodejs and npm (apt-get), for the calculator's Pyodide"; \
	    $(APT_INSTALL) nodejs npm >/dev/null; \
	  else echo "make docs needs npm for the calculator page's Pyodide (npm ci in tools/calculator): sudo apt-get install -y nodejs npm"; exit 2; fi; }
	@cd tools/calculator && npm ci --no-audit --no-fund --loglevel=error >/dev/null
	@touch $@

# Quiet when it succeeds: Sphinx prints only warnings (errors, with -W), and then where the site is.
docs: $(STAMP) $(CALC_NPM)
	@$(VENV)/bin/sphinx-build -W -n --keep-going -q -b html -d docs/_build/doctrees docs $(HTML)
	@echo "Built $(HTML)/: \`make preview\` serves it at http://127.0.0.1:$(PORT)/ (its search needs HTTP, not file://)"

# The built site over HTTP on this machine only, as it will be published.
preview: docs
	@echo "Serving $(HTML)/ at http://127.0.0.1:$(PORT)/ (Ctrl-C stops)"
	@$(PY) -m http.server --bind 127.0.0.1 --directory $(HTML) $(PORT)

# PyTorch and transformers (pinned in pyproject.toml's `validate` group) only for `make
# validate`, so `make test` stays light. torch is the CPU build: the pin alone resolves on Linux x86_64 to PyPI's CUDA
# build (torch plus nvidia-* and triton wheels, about 2.7 GB), while PyTorch's CPU index has
# torch==$(TORCH)+cpu (about 190 MB). A +cpu wheel pip finds with no index at all (a
# --find-links folder, as on machines that cannot reach that index) is taken first; otherwise
# the CPU index is added to PyPI, where pip prefers the +cpu build of the same version (and
# on macOS, which has no +cpu build, the two indexes hold the same CPU wheel).
TORCH       := 2.13.0
TORCH_INDEX ?= https://download.pytorch.org/whl/cpu
# $(call install_cpu_torch,python,extra pip flags)
define install_cpu_torch
	$(1) -m pip install --quiet --disable-pip-version-check --no-deps --no-index 'torch==$(TORCH)+cpu' 2>/dev/null \
	  || $(1) -m pip install --quiet --disable-pip-version-check $(2) --extra-index-url $(TORCH_INDEX) 'torch==$(TORCH)'
endef

$(VENV)/.installed-validate: $(STAMP)
	$(call install_cpu_torch,$(PY),-c $(LOCK))
	$(PY) -m pip install --quiet --disable-pip-version-check -c $(LOCK) --group validate
	touch $@

# Re-measures every configuration in docs/_data/measurements.json (TRAINMATH_FULL=0: a quick
# subset) and runs the other checks against PyTorch, on every core; `$(PY) -m validate.measure`
# rewrites it.
validate: $(VENV)/.installed-validate
	$(PY) -m pytest -q -p no:cacheprovider -n auto validate

# The built site in a real browser (tests/browser, pytest + selenium): Debian's chromium and
# chromium-driver, installed with apt-get when missing (as root; never a downloaded browser), and
# axe-core pinned in tests/browser/package-lock.json (npm ci).
$(VENV)/.installed-browser: $(STAMP)
	@$(PY) -m pip install --quiet --disable-pip-version-check -c $(LOCK) --group browser
	@touch $@

APT_INSTALL = apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq
tests/browser/node_modules/.package-lock.json: tests/browser/package-lock.json
	@command -v npm >/dev/null || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "Installing Debian's nodejs and npm (apt-get), for axe-core"; \
	    $(APT_INSTALL) nodejs npm >/dev/null; \
	  else echo "make browser needs npm: sudo apt-get install -y nodejs npm"; exit 2; fi; }
	@cd tests/browser && npm ci --no-audit --no-fund --loglevel=error >/dev/null
	@touch $@

browser-tools: $(VENV)/.installed-browser tests/browser/node_modules/.package-lock.json
	@test -x /usr/bin/chromium -a -x /usr/bin/chromedriver || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "Installing Debian's chromium and chromium-driver (apt-get)"; \
	    $(APT_INSTALL) chromium chromium-driver >/dev/null; \
	  else echo "make browser needs Debian's Chromium: sudo apt-get update && sudo apt-get install -y chromium chromium-driver"; \
	    exit 2; fi; }

browser: browser-tools docs
	TRAINMATH_BROWSER=1 $(PY) -m pytest -q -p no:cacheprovider tests/browser $(BROWSER_ARGS)

serve: $(STAMP) $(CALC_NPM)
	$(VENV)/bin/sphinx-autobuild -n docs $(HTML) --watch src --ignore '*/jupyter_execute/*'

# Resolve the newest releases into a scratch venv and pin them all.
lock:
	rm -rf .lock-venv
	$(PYTHON) -m venv .lock-venv
	.lock-venv/bin/python -m pip install --quiet --upgrade pip setuptools
	.lock-venv/bin/python -m pip install --quiet -e '.[precision,plots]' --group test --group docs --group browser
	$(call install_cpu_torch,.lock-venv/bin/python,)
	.lock-venv/bin/python -m pip install --quiet --group validate
	.lock-venv/bin/python -m pip freeze --all --exclude-editable | grep -v -e '^trainmath' -e '^torch==' > $(LOCK)
	rm -rf .lock-venv

clean:
	rm -rf docs/_build .pytest_cache
