"""app/cli.py: the verbs' dispatcher as a user runs it: --version, --help's usage naming every
verb, and a usage error (a port out of range) as one line on stderr with status 2, never a
traceback; nor is a model file cut short."""

from __future__ import annotations

import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def prism(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "app", *args], cwd=ROOT, text=True,
                          capture_output=True, timeout=60)


def test_version():
    r = prism("--version")
    assert r.returncode == 0 and r.stdout == f"prism {metadata.version('prism-inspector')}\n"


@pytest.mark.parametrize(("verb", "port", "why"), [
    ("serve", "70000", "a port is 0 to 65535, not 70000"),
    ("serve", "-1", "a port is 0 to 65535, not -1"),
    ("gui", "http", "not a port number: 'http'"),
])
def test_a_bad_port_is_one_line(verb, port, why):
    r = prism(verb, "--port", port)
    assert r.returncode == 2
    assert r.stderr == f"prism {verb}: argument --port: {why} (see prism {verb} --help)\n"


def test_help_names_every_verb_in_its_usage_line(monkeypatch):
    from app import cli

    r = prism("--help")
    assert r.returncode == 0
    first, *rest = r.stdout.splitlines()
    assert first == f"usage: prism [{'|'.join(cli.VERBS)}] [options] | prism --version"
    assert {"rerun", "stats"} <= set(first.split("[")[1].split("]")[0].split("|"))
    listed = [line.split()[0] for line in rest if line.startswith("  ")]
    assert listed == list(cli.VERBS)
    # A verb added to VERBS is in the usage line without another edit.
    monkeypatch.setitem(cli.VERBS, "later", ("app.later", "a verb added later"))
    assert cli._usage().splitlines()[0].startswith(f"usage: prism [{'|'.join(cli.VERBS)}]")
    assert "|later]" in cli._usage().splitlines()[0]


@pytest.mark.parametrize("verb", ["serve", "gui"])
def test_a_truncated_model_is_one_line_naming_it_not_a_traceback(verb, default_model, tmp_path):
    cut = tmp_path / "cut.gguf"
    with default_model.open("rb") as src:
        cut.write_bytes(src.read(default_model.stat().st_size // 2))
    r = subprocess.run([sys.executable, "-m", "app", verb, "--model", str(cut), "--port", "0",
                        "--no-record"], cwd=ROOT, text=True, capture_output=True, timeout=120,
                       env={**os.environ, "QT_QPA_PLATFORM": "offscreen"})
    assert r.returncode == 1
    assert "Traceback" not in r.stderr and "llama_model_load" not in r.stderr
    assert r.stderr.splitlines()[-1].startswith(f"prism: cannot load the model: {cut} is "
                                                "truncated: ")
