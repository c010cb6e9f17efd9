"""`prism probe` (app/probe.py), run as a user runs it: on a real template file (LFM2.5's, whose
Python-call list between its tokens is derived and self-tested: exit 0) and on the default
model's GGUF (SmolLM2's template renders no tool calls: it says so, exit 1)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from app.gui import window_title
from engine.chat.packs import load_pack, pack_from_template
from tests.engine.chat.test_probe import _JSON_LIST, CHATML, _template
from tests.support import LIBRARY, ROOT


def _probe(path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "app.cli", "probe", str(path)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)


@pytest.mark.skipif(not LIBRARY.is_dir(), reason="needs ../shared/templates")
def test_probe_on_a_template_file_prints_the_record_renders_and_self_test():
    out = _probe(LIBRARY / "LFM2.5-8B-A1B.jinja")
    assert out.returncode == 0, out.stderr
    assert "python list in <|tool_call_start|>" in out.stdout
    assert "section_end = '<|tool_call_end|>'" in out.stdout
    assert "--- two calls, two names" in out.stdout
    assert "<|tool_call_start|>[prism_alpha(prism_ka='PRISM-V1'), prism_beta(" in out.stdout
    assert "self-test: passed" in out.stdout
    assert "format: lfm2" in out.stdout


def test_probe_on_the_default_models_gguf_says_it_renders_no_calls():
    out = _probe(load_pack("smollm2").gguf)
    assert out.returncode == 1, out.stderr
    assert "the template renders no tool calls" in out.stdout
    assert "self-test: not run" in out.stdout


def test_probe_on_a_missing_file_is_one_line_and_exit_2(tmp_path):
    out = _probe(tmp_path / "nope.jinja")
    assert out.returncode == 2 and out.stderr.startswith("prism probe:")


def test_the_window_title_names_a_derived_format():
    pack = pack_from_template("derived", _template(*CHATML, "<calls>" + _JSON_LIST + "</calls>"),
                              "test")
    assert window_title("replay", pack) == ("Prism — replay (derived, format derived from the "
                                            "template (json list in <calls>))")
