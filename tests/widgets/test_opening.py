"""widgets/main_window.py opening recordings: the panes follow the newest request of a file
played at once, and a file damaged part-way says where, while what precedes plays."""

from __future__ import annotations

from engine.record.reader import read_session
from tests.support import DEMO
from tests.widgets.conftest import play_all


def test_a_file_played_at_once_shows_its_newest_request(window):
    play_all(window)
    newest = read_session(DEMO).requests[-1]
    assert window.log.current is not None and window.log.current.id == newest.id
    # The panes draw that request, not an empty one.
    shown = window.channels.text("content") + window.channels.text("reasoning")
    assert shown.strip(), "the panes are empty"
    assert window.raw.text() == window.log.current.raw


def test_a_file_damaged_part_way_plays_what_precedes_and_names_the_line(window, tmp_path):
    lines = DEMO.read_text(encoding="utf-8").splitlines(keepends=True)
    first_finish = next(i for i, line in enumerate(lines) if '"type": "finish"' in line)
    path = tmp_path / "cut.jsonl"
    path.write_text("".join(lines[:first_finish + 1]) + '{"type": "token", "id": \n',
                    encoding="utf-8")
    window.playback.set_speed(0.0)
    assert window.open_recording(path)
    said = window.message.text()
    assert "cut.jsonl" in said and f"line {first_finish + 2}" in said, said
    assert window.message.error
