# trainmath: `make test` runs every check, `make docs` builds the site. Both set up .venv/.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
LOCK   := requirements/constraints.txt
HTML   := docs/_build/html

.PHONY: help test docs serve validate browser lock clean

help:
	@echo "make test   run unit tests, every page's examples and claims, and the number lint"
	@echo "make docs   build the site into $(HTML) (warnings are errors)"
	@echo "make serve  rebuild and reload the site while you edit"
	@echo "make validate  check the library against real PyTorch on the CPU (installs torch)"
	@echo "make browser   check the claims' popups, keyboard and search in Chromium (apt: chromium chromium-driver)"
	@echo "make lock   regenerate $(LOCK) from the newest compatible releases"

$(STAMP): pyproject.toml $(LOCK)
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -c $(LOCK) pip setuptools
	$(PY) -m pip install --quiet --disable-pip-version-check --no-build-isolation -c $(LOCK) -e '.[docs,test]'
	touch $@

test: $(STAMP)
	$(PY) -m pytest -q

docs: $(STAMP)
	$(VENV)/bin/sphinx-build -W -n --keep-going -q -b html docs $(HTML)
	@echo "Built the site: open $(abspath $(HTML))/index.html"

# PyTorch (CPU build, pinned in pyproject.toml) only for `make validate`, so `make test` stays light.
$(VENV)/.installed-validate: $(STAMP)
	$(PY) -m pip install --quiet --disable-pip-version-check --no-build-isolation -c $(LOCK) -e '.[docs,test,validate]'
	touch $@

validate: $(VENV)/.installed-validate
	$(PY) -m pytest -q -p no:cacheprovider validate

# The claims in a real browser: Debian's chromium and chromium-driver, never a downloaded one.
$(VENV)/.installed-browser: $(STAMP)
	$(PY) -m pip install --quiet --disable-pip-version-check --no-build-isolation -c $(LOCK) -e '.[docs,test,browser]'
	touch $@

browser: $(VENV)/.installed-browser docs
	@test -x /usr/bin/chromium -a -x /usr/bin/chromedriver || { \
	  echo "make browser needs Debian's Chromium: apt-get update && apt-get install -y chromium chromium-driver"; \
	  exit 2; }
	$(PY) tests/browser/check_claims.py --site $(HTML) $(BROWSER_ARGS)

serve: $(STAMP)
	$(VENV)/bin/sphinx-autobuild -n docs $(HTML) --watch src --ignore '*/jupyter_execute/*'

# Resolve the newest releases into a scratch venv and pin them all.
lock:
	rm -rf .lock-venv
	$(PYTHON) -m venv .lock-venv
	.lock-venv/bin/python -m pip install --quiet --upgrade pip setuptools
	.lock-venv/bin/python -m pip install --quiet -e '.[docs,test,browser]'
	.lock-venv/bin/python -m pip install --quiet -e '.[validate]'
	.lock-venv/bin/python -m pip freeze --all --exclude-editable | grep -v -e '^trainmath' -e '^torch==' > $(LOCK)
	rm -rf .lock-venv

clean:
	rm -rf docs/_build .pytest_cache
