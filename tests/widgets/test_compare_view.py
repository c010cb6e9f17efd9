"""widgets/compare_view.py in the real window: a real rerun compared with its original (the
default model at two seeds), two requests picked from the request list, and the screenshot.

The panes are read back fragment by fragment: the parting token is the one span carrying the
`PART` property, and the text before it must be exactly what both runs share.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from engine.backends.llama.engine import LlamaEngine
from engine.record.compare import compare_sessions
from engine.record.reader import read_session
from tests.app.test_rerun import record_original, rerun_into, service_on
from tests.support import DEMO
from tests.widgets.conftest import fragments, play_all
from widgets.compare_view import PART, side_of_track

SHOT = Path(os.environ.get("PRISM_COMPARE_SHOT", "/tmp/compare.png"))


@pytest.fixture(scope="module")
def rerun_pair(default_model, tmp_path_factory) -> tuple[Path, Path]:
    """An original on the default model (seed 1) and its rerun at seed 2."""
    folder = tmp_path_factory.mktemp("compare")
    engine = LlamaEngine(default_model, n_ctx=1024, n_threads=1, parallel=1)
    try:
        original = record_original(engine, folder / "orig.jsonl", max_tokens=40)
        rerun_into(service_on(engine, "smollm2", None), original, folder / "rerun.jsonl", seed=2)
    finally:
        engine.close()
    return original, folder / "rerun.jsonl"


def parted_at(pane) -> tuple[str, str]:
    """(the text before the marked token, the marked token's text) in a raw pane."""
    before, marked = "", None
    for text, fmt in fragments(pane):
        if fmt.property(PART):
            marked = text
            break
        before += text
    assert marked is not None, "no token is marked as the parting"
    return before, marked


def test_a_rerun_against_its_original(window, rerun_pair, qtbot) -> None:
    original, rerun = rerun_pair
    assert window.compare_recordings(rerun)  # one file: a rerun, compared with its original
    view = window.compare
    assert window.tabs.currentWidget() is view
    expected = compare_sessions(read_session(original), read_session(rerun), ("was", "now"))
    # Every pair listed, the most changed first, as the compare module sorts them.
    assert view.pairs.rowCount() == len(expected) > 1
    assert [view.pairs.item(r, 0).text() for r in range(len(expected))] == \
        [c.a.id for c in expected]
    assert [float(view.pairs.item(r, 1).text()) for r in range(len(expected))] == \
        sorted((round(c.change, 2) for c in expected), reverse=True)
    for row, c in enumerate(expected):
        view.pairs.selectRow(row)
        assert view.summary.text() == c.summary()
        if c.parting is None:
            continue
        for which, side, k in (("a", c.a, c.parting.index_a), ("b", c.b, c.parting.index_b)):
            before, marked = parted_at(view.panes[("raw", which)])
            # What both runs share, then this side's own token where they part.
            assert before == c.a.text[:c.parting.offset] == c.b.text[:c.parting.offset]
            assert marked == (side.tokens[k].text or "⟂") if k < len(side.tokens) else "⟂"
        # The content panes: each side's own text, the part the other lacks shaded.
        for which, side in (("a", c.a), ("b", c.b)):
            pane = view.panes[("content", which)]
            assert pane.toPlainText() == side.result["content"]
    view.pairs.selectRow(0)
    window.resize(1560, 980)
    qtbot.wait(50)
    SHOT.parent.mkdir(parents=True, exist_ok=True)
    assert window.grab().save(str(SHOT))


def test_two_requests_picked_from_the_list(window) -> None:
    items = play_all(window, DEMO)
    first, last = items[0].track, items[-1].track
    window.log.select(first)
    window.compare.pick_a.click()
    window.log.select(last)
    window.compare.pick_b.click()
    c = window.compare.comparison
    assert c is not None and c.a.id == first.id and c.b.id == last.id
    want = side_of_track(first), side_of_track(last)
    assert (c.a.text, c.b.text) == (want[0].text, want[1].text)
    assert c.parting is not None and window.compare.summary.text() == c.summary()
    # Different requests: the demo's first asks nothing of tools, the last calls one.
    assert not c.same_calls and "same calls? no" in c.summary()


def test_a_recording_that_is_no_rerun_alone_is_refused(window) -> None:
    assert not window.compare_recordings(DEMO)
    assert "not a rerun" in window.message.text()
