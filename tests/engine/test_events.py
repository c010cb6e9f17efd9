"""engine/events.py: `CallsAsText`, what a client that declared no tools receives in place of a
call (the server's decision, issue 11 item 6), over outputs parsed every way."""

from __future__ import annotations

import pytest

from engine.events import (
    ANOMALY,
    CONTENT,
    REASONING,
    TOOL_ARGS,
    TOOL_CALL,
    TOOL_START,
    CallsAsText,
    calls_as_text,
    result_of,
)
from tests.engine.parser_harness import random_chunks, run

CALL = "<tool_call>\n<function=f>\n<parameter=a>\n1\n</parameter>\n</function>\n</tool_call>"
BARE = "<function=f>\n<parameter=a>\nx\n</parameter>\n</function>"
HERMES = '<tool_call>\n{"name": "g", "arguments": {"b": 2}}\n</tool_call>'


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(("text", "start", "reasoning", "content"), [
    # in the answer: the call is answer text, verbatim, with the newlines around it
    ("Sure.\n\n" + CALL + "\n\nDone.", "content", "", "Sure.\n\n" + CALL + "\n\nDone."),
    ("Hi\n" + BARE + "\nok", "content", "", "Hi\n" + BARE + "\nok"),
    (HERMES + HERMES, "content", "", HERMES + HERMES),
    # written inside the thinking: it goes back to the thinking; the answer after it stays
    ("Plan.\n" + CALL + "\nThe answer.", "reasoning", "Plan.\n" + CALL, "The answer."),
])
def test_calls_become_text_in_their_channel(text, start, reasoning, content, stream):
    for chunks in (None, [1] * len(text), random_chunks(text, 7)):
        events = run(text, chunks, start=start, stream_tools=stream, tools_declared=True)
        assert any(e.kind == TOOL_CALL for e in events)  # the inspector still sees calls
        client = calls_as_text(events)
        assert not [e for e in client if e.kind in (TOOL_START, TOOL_ARGS, TOOL_CALL)]
        res = result_of(client, "stop")
        assert (res.reasoning, res.content) == (reasoning, content)
        assert res.tool_calls == () and res.finish_reason == "stop"
        assert res.anomalies["unknown_tool"] == result_of(events).anomalies["unknown_tool"] > 0


def test_a_call_that_failed_after_streaming_is_text_once():
    text = "ok " + CALL[:50]  # the output ends inside the call
    events = run(text, [1] * len(text), start="content", stream_tools=True,
                 tools_declared=True)
    assert any(e.kind == TOOL_START for e in events)
    res = result_of(calls_as_text(events))
    assert res.content == text and res.anomalies["unfinished_call"] == 1


def test_incremental_feed_equals_the_whole_list():
    text = "a\n" + CALL + "\nb\n" + BARE
    events = run(text, [3] * len(text), start="content", stream_tools=True,
                 tools_declared=True)
    f = CallsAsText()
    assert [x for ev in events for x in f.feed(ev)] == calls_as_text(events)


def test_other_events_pass_through_untouched():
    events = run("think\n</think>\n\nanswer </think> more", stream_tools=True)
    assert calls_as_text(events) == events
    kinds = {e.kind for e in events}
    assert {REASONING, CONTENT, ANOMALY} <= kinds
