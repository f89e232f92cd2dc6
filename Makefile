# trainmath: `make test` runs every check, `make docs` builds the site. Both set up .venv/.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
LOCK   := requirements/constraints.txt
HTML   := docs/_build/html

.PHONY: help test docs serve validate lock clean

help:
	@echo "make test   run unit tests, every page's examples and claims, and the number lint"
	@echo "make docs   build the site into $(HTML) (warnings are errors)"
	@echo "make serve  rebuild and reload the site while you edit"
	@echo "make validate  check the library against real PyTorch on the CPU (installs torch)"
	@echo "make lock   regenerate $(LOCK) from the newest compatible releases"

# The project with its `precision` extra, plus the `test` and `docs` dependency groups (PEP 735,
# pyproject.toml), and the claim machinery (tools/mystclaims), all pinned by $(LOCK). pip is upgraded first: `--group` needs pip 25.1 or newer.
$(STAMP): pyproject.toml tools/mystclaims/pyproject.toml $(LOCK)
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -c $(LOCK) pip setuptools
	$(PY) -m pip install --quiet --disable-pip-version-check --no-build-isolation -c $(LOCK) \
		-e '.[precision]' --group test --group docs -e ./tools/mystclaims
	touch $@

test: $(STAMP)
	$(PY) -m pytest -q

docs: $(STAMP)
	$(VENV)/bin/sphinx-build -W -n --keep-going -q -b html docs $(HTML)
	@echo "Built the site: open $(abspath $(HTML))/index.html"

# PyTorch (CPU build, pinned in the `validate` group) only for `make validate`, so `make test` stays light.
$(VENV)/.installed-validate: $(STAMP)
	$(PY) -m pip install --quiet --disable-pip-version-check -c $(LOCK) --group validate
	touch $@

validate: $(VENV)/.installed-validate
	$(PY) -m pytest -q -p no:cacheprovider validate

serve: $(STAMP)
	$(VENV)/bin/sphinx-autobuild -n docs $(HTML) --watch src --ignore '*/jupyter_execute/*'

# Resolve the newest releases into a scratch venv and pin them all.
lock:
	rm -rf .lock-venv
	$(PYTHON) -m venv .lock-venv
	.lock-venv/bin/python -m pip install --quiet --upgrade pip setuptools
	.lock-venv/bin/python -m pip install --quiet -e '.[precision]' --group test --group docs
	.lock-venv/bin/python -m pip install --quiet --group validate
	.lock-venv/bin/python -m pip freeze --all --exclude-editable | grep -v -e '^trainmath' -e '^torch==' > $(LOCK)
	rm -rf .lock-venv

clean:
	rm -rf docs/_build .pytest_cache
