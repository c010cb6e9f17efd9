"""engine/backends/llama/log.py: llama.cpp's lines go to the logger "prism.llama" and never touch
the process's streams (issue 9, item 2), and llama-cpp-python's /dev/null files are closed at exit,
so a run that imported it ends without a ResourceWarning (issue 9, item 8). The process-wide
parts run in a subprocess: what they change (the C log callback, exit) cannot be undone."""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path

import pytest

from engine.backends.llama import log as llama_log

ROOT = Path(__file__).resolve().parents[4]


def python(code: str) -> subprocess.CompletedProcess:
    # -X dev shows ResourceWarnings (Python hides them by default), as pytest's run does.
    return subprocess.run([sys.executable, "-X", "dev", "-c", code], cwd=ROOT, text=True,
                          capture_output=True, timeout=120)


def test_a_line_sent_in_pieces_is_one_record_errors_at_warning(caplog):
    caplog.set_level(logging.DEBUG, logger="prism.llama")
    llama_log._emit(2, "llama_model_load: ")
    llama_log._emit(5, "loaded 30 layers\n")  # CONT: continues the line, at its level
    llama_log._emit(4, "failed to open\n")
    llama_log._emit(3, "\n")  # an empty line is not logged
    assert [(r.name, r.levelno, r.getMessage()) for r in caplog.records] == [
        ("prism.llama", logging.DEBUG, "llama_model_load: loaded 30 layers"),
        ("prism.llama", logging.WARNING, "failed to open"),
    ]


@pytest.mark.parametrize("module", ["engine.grammar.json_schema", "engine.backends.llama.log"])
def test_importing_llama_cpp_leaves_no_unclosed_devnull(module):
    r = python(f"import {module}, llama_cpp")
    assert r.returncode == 0, r.stderr
    assert "ResourceWarning" not in r.stderr, r.stderr


@pytest.mark.model
def test_a_model_load_logs_to_prism_llama_not_to_the_streams(default_model):
    # The vocab-only load (engine/backends/llama/vocab.py) goes through llama.cpp's loader, which
    # logs dozens of lines; with install() they are log records, and fds 1 and 2 stay the process's
    # own.
    r = python(
        "import logging, sys\n"
        "logging.basicConfig(level=logging.DEBUG, stream=sys.stdout,"
        " format='%(name)s %(levelname)s %(message)s')\n"
        "from engine.backends.llama.vocab import Vocab\n"
        "print('before', flush=True); print('err-before', file=sys.stderr, flush=True)\n"
        f"v = Vocab({str(default_model)!r})\n"
        "print('after', flush=True); print('err-after', file=sys.stderr, flush=True)\n")
    assert r.returncode == 0, r.stderr
    out = r.stdout.splitlines()
    llama = [line for line in out if line.startswith("prism.llama DEBUG ")]
    assert len(llama) > 10 and any("llama_model_loader" in line for line in llama)
    assert out[0] == "before" and out[-1] == "after"
    assert r.stderr.splitlines() == ["err-before", "err-after"]
