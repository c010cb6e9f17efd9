"""widgets/channel_view.py and widgets/raw_view.py: a replay fills every pane with the right
text in the right state formats; the held-back tail is drawn apart and resolves; the recorded
failures are marked inline."""

from __future__ import annotations

import json

import pytest

from engine.parse.events import IMPLICIT_REASONING_END, REPAIRED_CALL, STRAY_THINK_END, merge
from tests.widgets.conftest import DEMO, fragments, play_all, recorded_failures
from widgets.request_log import ANOMALIES_COL, FINISH_COL
from widgets.theme import ANOMALY, HELD, STATE

_RAW_STATE = {"reasoning": "reasoning", "content": "content", "markup": "markup",
              "tool_start": "call", "tool_args": "call", "tool_call": "call"}


def by_state(pane) -> dict[str, str]:
    """Text per STATE property (Qt keeps newlines as block breaks, outside fragments, so they
    are left out here; `flat()` drops them from what it is compared with)."""
    out: dict[str, str] = {}
    for text, fmt in fragments(pane):
        key = fmt.property(STATE) or "plain"
        out[key] = out.get(key, "") + text
    return out


def flat(text: str) -> str:
    return text.replace("\n", "")


def without_ids(result: dict) -> dict:
    # Anomaly kinds counted 0 are dropped: a recording made before a kind existed lacks it.
    return {**result, "tool_calls": [{k: v for k, v in c.items() if k != "id"}
                                     for c in result["tool_calls"]],
            "anomalies": {k: n for k, n in result["anomalies"].items() if n}}


def test_replay_fills_each_pane_with_the_right_text_and_formats(window):
    items = play_all(window)
    assert [it.track.status for it in items] == ["done"] * 3
    for it in items:
        track = it.track
        window.log.select(track)
        result = track.result
        # The playback's parser reads the recording as the live run did.
        assert without_ids(result.to_dict()) == without_ids(track.recorded_result)
        panes = window.channels.panes
        reasoning = by_state(panes["reasoning"])
        assert reasoning.get("reasoning", "") == flat(result.reasoning)
        assert result.reasoning in window.channels.text("reasoning")
        assert set(reasoning) <= {"reasoning", "anomaly"}
        content = by_state(panes["content"])
        assert content.get("content", "") == flat(result.content)
        assert result.content in window.channels.text("content")
        assert set(content) <= {"content", "anomaly"}
        tools = panes["call"].toPlainText()
        for call in result.tool_calls:
            assert f"▸ {call.name}" in tools
            assert json.dumps(call.arguments, indent=2) in tools
        assert by_state(panes["call"]).get("call", "") == flat("".join(
            json.dumps(c.arguments, indent=2) for c in result.tool_calls))
        # The raw view is the output itself, every span in its state's format.
        raw = window.raw
        assert raw.text() == track.raw
        for ev in merge(track.events):
            a, b = ev.span
            # Newlines are block separators in Qt, without a character format of their own.
            visible = [i for i in range(a, b) if track.raw[i] != "\n"]
            for pos in visible[:1] + visible[-1:]:
                fmt = raw.raw.format_at(pos)
                want = "anomaly" if ev.kind == "anomaly" else _RAW_STATE[ev.kind]
                assert fmt.property(STATE) == want, (ev, pos)
                assert not fmt.property(HELD)
        assert raw.strip._n == len(track.tokens)
        assert raw.strip.toPlainText() == "".join(
            t.text.replace("\n", "⏎\n") for t in track.tokens)


def test_every_colour_of_the_demo_request(window):
    """The last demo request (the README screenshot) shows each state and both anomalies."""
    items = play_all(window)
    assert window.log.current is items[-1].track
    content = list(fragments(window.channels.panes["content"]))
    stray = [f for t, f in content if f.property(ANOMALY) == STRAY_THINK_END]
    assert stray and stray[0].fontStrikeOut() and "Stray </think>" in stray[0].toolTip()
    reasoning = list(fragments(window.channels.panes["reasoning"]))
    marks = [(t, f) for t, f in reasoning if f.property(ANOMALY) == IMPLICIT_REASONING_END]
    assert marks and "Implicit end of thinking" in marks[0][1].toolTip()
    states = {f.property(STATE) for _, f in fragments(window.raw.raw)}
    assert {"reasoning", "content", "call", "anomaly"} <= states
    window.log.select(items[0].track)  # a well-formed </think>: the tag colour
    assert "markup" in {f.property(STATE) for _, f in fragments(window.raw.raw)}
    assert window.log.model.data(window.log.model.index(0, ANOMALIES_COL)) == \
        "implicit end×1 stray </think>×1"


def test_held_tail_is_drawn_apart_and_resolves(window):
    pb = window.playback
    pb.open(DEMO, play=False)
    pb.select(2)
    window.frame()
    track = pb.current.track
    seen_held = None
    while pb.current.pos <= len(pb.current.tokens):
        pb.step()
        window.frame()
        held = track.held
        pane = window.channels.panes[track.state]
        if held:
            # Drawn dim at the end of the pane of the current state, and in the raw view.
            assert pane.tail_text == held
            tail_fmt = pane.format_at(pane.end())
            assert tail_fmt.property(HELD) is True
            assert tail_fmt.property(STATE) == track.state
            assert window.raw.raw.tail_text == held
            assert window.raw.text() + held == track.raw
            if "<tool_call>" in held:
                seen_held = held
        elif seen_held is not None:
            break
    assert seen_held is not None, "the call tag was never held back"
    # Resolved: no tail anywhere, the call is read, the tag is no longer reasoning.
    assert all(p.tail_text == "" for p in window.channels.panes.values())
    assert "▸ get_weather" in window.channels.panes["call"].toPlainText()
    assert "<tool_call>" not in window.channels.text("reasoning")
    pb.seek(len(pb.current.tokens) + 1)
    window.frame()
    assert track.status == "done" and window.raw.raw.tail_text == ""


@pytest.mark.parametrize("stream_tools", [True, False])
def test_recorded_failures_are_marked(window, tmp_path, stream_tools):
    paths = []
    for i, text in enumerate(recorded_failures()):
        p = tmp_path / f"failure{i}.txt"
        p.write_text(text, encoding="utf-8")
        paths.append(p)
    pb = window.playback
    pb.set_speed(0.0)
    for p in paths:
        items = pb.open(p, play=False)
        for it in items:
            it.track.stream_tools = stream_tools
    pb.select(0)  # each open jumps to the file it opened; play all four from the first
    pb.play()
    window.frame()
    assert len(pb.items) == 4 and pb.finished
    for row, it in enumerate(reversed(pb.items)):
        track = it.track
        assert track.anomalies[IMPLICIT_REASONING_END] == 1
        assert len(track.result.tool_calls) == 1
        window.log.select(track)
        marks = [f for _, f in fragments(window.channels.panes["reasoning"])
                 if f.property(ANOMALY) == IMPLICIT_REASONING_END]
        assert marks and marks[0].toolTip().startswith("Implicit end of thinking")
        name = track.result.tool_calls[0].name
        assert f"▸ {name}" in window.channels.panes["call"].toPlainText()
        flagged = [t for t, f in fragments(window.raw.raw)
                   if f.property(ANOMALY) == IMPLICIT_REASONING_END]
        assert "".join(flagged).count("</tool_call>") == 1
        assert "<tool_call>" not in window.channels.text("reasoning")
        model = window.log.model
        assert model.data(model.index(row, ANOMALIES_COL)) == "implicit end×1"
        assert model.data(model.index(row, FINISH_COL)) == "tool_calls"


@pytest.mark.parametrize("stream_tools", [True, False])
def test_a_repaired_call_is_marked_with_its_repairs(window, tmp_path, stream_tools):
    # A drifted closer and a Python literal (issue 11): the call is accepted, and the tools
    # pane, the raw view and the request row say it was repaired, and how.
    p = tmp_path / "repaired.txt"
    p.write_text("Check.\n</think>\n\nOn it.\n<function=f>\n<parameter=a>\nx\n</parameter1>\n"
                 "<parameter=b>\n{'k': True}\n</parameter>\n</function>", encoding="utf-8")
    pb = window.playback
    pb.set_speed(0.0)
    items = pb.open(p, play=False)
    items[0].track.stream_tools = stream_tools
    pb.play()
    window.frame()
    track = items[0].track
    assert track.anomalies[REPAIRED_CALL] == 1
    assert track.result.tool_calls[0].arguments == {"a": "x", "b": "{'k': True}"}  # no schema
    window.log.select(track)
    marks = [(t, f) for t, f in fragments(window.channels.panes["call"])
             if f.property(ANOMALY) == REPAIRED_CALL]
    assert marks and "repaired call" in marks[0][0]
    assert marks[0][1].toolTip().startswith("Repaired call")
    assert "no <tool_call>, drifted </parameter>" in marks[0][1].toolTip()
    flagged = [t for t, f in fragments(window.raw.raw) if f.property(ANOMALY) == REPAIRED_CALL]
    assert "".join(flagged).startswith("<function=f>")
    model = window.log.model
    assert model.data(model.index(0, ANOMALIES_COL)) == "repaired call×1"


UNITS = ({"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object",
    "properties": {"city": {"type": "string"}, "days": {"type": "integer"},
                   "units": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
    "required": ["city", "days", "units"]}}},)
NO_UNITS = ("Go.\n</think>\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n"
            "</parameter>\n<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>")


@pytest.mark.parametrize("stream_tools", [True, False])
def test_a_call_that_breaks_its_schema_shows_what_failed(window, replay_service, stream_tools):
    # Issue 22: a live run recorded, played back in the window: the tools pane writes what
    # failed and where under the call (shown as the model wrote it), the raw view flags the
    # call with it, the request row counts it.
    from engine.chat.request import ChatRequest, Message
    from engine.parse.events import INVALID_ARGUMENTS

    svc = replay_service(NO_UNITS, record=True)
    svc.submit(ChatRequest(messages=(Message("user", "Weather?"),), tools=UNITS,
                           stream_tools=stream_tools)).wait(5)
    svc.recorder.close()
    items = play_all(window, svc.recorder.path)
    track = items[0].track
    assert track.status == "done" and track.anomalies[INVALID_ARGUMENTS] == 1
    window.log.select(track)
    why = "/units: 'units' is a required property"
    pane = window.channels.panes["call"]
    assert json.loads(pane.toPlainText().split("\n", 1)[1].rsplit("}", 1)[0] + "}") == {
        "city": "Paris", "days": 3}  # the call as written, units still missing
    marks = [(t, f) for t, f in fragments(pane) if f.property(ANOMALY) == INVALID_ARGUMENTS]
    assert "".join(t for t, _ in marks) == f"⚠ invalid arguments: {why}"
    assert marks[0][1].toolTip().startswith("Invalid arguments") and why in marks[0][1].toolTip()
    flagged = [(t, f) for t, f in fragments(window.raw.raw)
               if f.property(ANOMALY) == INVALID_ARGUMENTS]
    call_text = "".join(t for t, _ in flagged)
    assert "<function=get_weather>" in call_text and "</function>" in call_text
    assert all(why in f.toolTip() for _, f in flagged)
    assert "Go." not in call_text  # only the call is flagged
    model = window.log.model
    assert model.data(model.index(0, ANOMALIES_COL)) == "invalid arguments×1"
