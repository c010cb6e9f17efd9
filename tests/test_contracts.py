"""pyproject.toml's import-linter contracts: each one catches the violation it is there for.

One copy of the packages and pyproject.toml in a temporary folder, shared by every test: a test
plants one violating import (or module) there, runs `lint-imports` on the copy and checks that it
fails and reports the contract BROKEN by name, then restores the file. The unmodified copy passes.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("app", "engine", "inspector", "widgets")
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")

CONTRACTS = [c["name"] for c in tomllib.loads((ROOT / "pyproject.toml").read_text())
             ["tool"]["importlinter"]["contracts"]]

# contract name -> (file in the copy, the line planted at its end), each one violation
# the layers contract's name spells its layers; found by its prefix so a new layer needs no edit
ENGINE_LAYERS = next(name for name in CONTRACTS if name.startswith("engine's layers: "))
PLANTS = {
    "layers: app > widgets > inspector > engine":
        ("inspector/tracks.py", "import widgets.theme"),
    "engine is Qt-free and HTTP-free, and imports no layer above it":
        ("engine/metrics.py", "import fastapi"),
    "inspector (the Qt-free model) imports neither Qt, nor views, nor wiring":
        ("inspector/playback.py", "import PySide6"),
    "widgets never import the wiring (app)":
        ("widgets/theme.py", "import app.config"),
    "the HTTP API imports no Qt, directly or not":
        ("app/api/sse.py", "import pyqtgraph"),
    ENGINE_LAYERS:
        ("engine/chat/request.py", "import engine.service"),
    "engine.parse (the output parser) imports only the standard library":
        ("engine/parse/quoting.py", "import jinja2"),
    # llama and upstream share a layer (backends): only the independence contract sees this one
    "the token sources llama, upstream and replay (engine.record) are independent":
        ("engine/backends/upstream/wire.py", "import engine.backends.llama.kv_plan"),
    "llama_cpp is imported only by engine.backends.llama and engine.grammar":
        ("app/cli.py", "import llama_cpp"),
}


@pytest.fixture(scope="module")
def copy(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("contracts")
    for package in PACKAGES:
        shutil.copytree(ROOT / package, root / package,
                        ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", root / "pyproject.toml")
    return root


def lint(root: Path) -> subprocess.CompletedProcess[str]:
    """`lint-imports` on the copy: run there and first on the path, so grimp reads the copy and
    not the editable install; no cache, so a planted file is always read again."""
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run([str(LINT_IMPORTS), "--no-logo", "--no-cache", "pyproject.toml"],
                          cwd=root, env=env, text=True, capture_output=True, timeout=120)


def broken(result: subprocess.CompletedProcess[str], name: str) -> bool:
    """Whether the summary says the contract BROKEN (lint-imports wraps long names)."""
    return f"{name} BROKEN" in " ".join((result.stdout + result.stderr).split())


def test_every_contract_has_a_plant():
    assert sorted(PLANTS) == sorted(CONTRACTS)


def test_the_unmodified_copy_passes(copy):
    result = lint(copy)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"Contracts: {len(CONTRACTS)} kept, 0 broken." in result.stdout


@pytest.mark.parametrize("name", list(PLANTS))
def test_a_planted_violation_breaks_the_contract(copy, name):
    path, line = PLANTS[name]
    target = copy / path
    original = target.read_text()
    target.write_text(f"{original}\n{line}  # planted by tests/test_contracts.py\n")
    try:
        result = lint(copy)
    finally:
        target.write_text(original)
    assert result.returncode != 0
    assert broken(result, name), result.stdout + result.stderr


def test_a_new_engine_module_must_be_given_a_layer(copy):
    """The engine's layers contract is exhaustive: a module it does not place breaks it."""
    extra = copy / "engine" / "extra.py"
    extra.write_text('"""A module no layer lists."""\n')
    try:
        result = lint(copy)
    finally:
        extra.unlink()
    assert result.returncode != 0
    assert broken(result, ENGINE_LAYERS), result.stdout + result.stderr
    assert "- engine.extra" in result.stdout
