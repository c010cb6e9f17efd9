"""widgets/reparse_view.py: re-parse the selected request under other settings and see the
difference; export it as a fixture that reproduces its result."""

from __future__ import annotations

import json

from tests.widgets.conftest import fixture_result, play_all


def test_reparse_shows_what_other_settings_change(window):
    items = play_all(window)
    view = window.reparse
    track = items[-1].track
    assert view.track is track
    assert view.start.currentText() == "reasoning" and view.family.currentText() == "qwen-xml"

    assert view.reparse() == []
    assert view.summary.text().startswith("Same reading")

    # Read as if thinking were off: the reasoning becomes content, the call is no longer an
    # implicit end of thinking, and the stray </think> is dropped all the same.
    view.start.setCurrentText("content")
    lines = view.reparse()
    assert lines
    assert "-implicit_reasoning_end: 1" in lines
    assert any(line.startswith("+Now the user asks about Lisbon") for line in lines)
    assert "reasoning 205 → 0" in view.summary.text()
    assert "anomalies 2 → 1" in view.summary.text()
    assert "-implicit_reasoning_end: 1" in view.out.toPlainText()

    # Hermes JSON cannot read a Qwen XML call: it stays reasoning, the call is gone.
    view.start.setCurrentText("reasoning")
    view.family.setCurrentText("hermes-json")
    view.reparse()
    assert "calls 1 → 0" in view.summary.text()
    assert "finish tool_calls → stop" in view.summary.text()


def test_export_fixture_reproduces_the_result(window, tmp_path):
    items = play_all(window)
    track = items[-1].track
    path = window.reparse.export(tmp_path / "fixture.json")
    data = json.loads(path.read_text(encoding="utf-8"))
    assert data["format"] == "prism-fixture" and data["version"] == 1
    assert data["raw"] == track.raw == "".join(data["chunks"])
    settings = data["parser"]  # the track's reading: how it was read, filters included
    assert settings == track.reading.to_dict()
    assert (settings["start"], settings["family"], settings["stream_tools"]) == (
        "reasoning", "qwen-xml", True)
    assert settings["tools"] == list(track.tools) and settings["tools_declared"]
    assert fixture_result(data) == data["expected"]
    assert data["expected"]["anomalies"]["implicit_reasoning_end"] == 1
    assert data["expected"]["tool_calls"][0]["arguments"] == {"city": "Lisbon",
                                                              "unit": "celsius"}
