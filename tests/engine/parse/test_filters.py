"""engine/parse/filters.py: the one filter protocol and `Chain`; `CallsAsText`, what a client that
declared no tools receives in place of a call (the server's decision, issue 11 item 6), and
`FirstCallOnly`, what a request that allows one call per reply receives (parallel calls off),
over outputs parsed every way."""

from __future__ import annotations

import pytest

from engine.parse.events import (
    ANOMALY,
    CONTENT,
    EXTRA_TOOL_CALL,
    REASONING,
    TOOL_ARGS,
    TOOL_CALL,
    TOOL_START,
    Event,
    result_of,
)
from engine.parse.filters import CallsAsText, Chain, FirstCallOnly, through
from tests.engine.parse.parser_harness import random_chunks, run


def calls_as_text(events):
    return through([CallsAsText()], events)


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
    assert [x for ev in events for x in f.feed([ev])] + f.finish() == calls_as_text(events)


def test_other_events_pass_through_untouched():
    events = run("think\n</think>\n\nanswer </think> more", stream_tools=True)
    assert calls_as_text(events) == events
    kinds = {e.kind for e in events}
    assert {REASONING, CONTENT, ANOMALY} <= kinds


SECOND = CALL.replace("<function=f>", "<function=g>")


def first_call_only(events):
    f = FirstCallOnly()
    return [x for ev in events for x in f.feed([ev])] + f.finish()


@pytest.mark.parametrize("stream", [False, True])
def test_one_call_only_keeps_the_first_and_spans_still_tile(stream):
    text = "Sure.\n" + CALL + "\n" + SECOND + "\n" + HERMES + "\nDone."
    for chunks in (None, [1] * len(text), random_chunks(text, 5)):
        events = run(text, chunks, start="content", stream_tools=stream, tools_declared=True)
        assert len(result_of(events).tool_calls) == 3  # what the model wrote
        client = first_call_only(events)
        res = result_of(client, "stop")
        assert [c.name for c in res.tool_calls] == ["f"] and res.finish_reason == "tool_calls"
        assert res.content == result_of(events).content  # the text around calls is untouched
        extra = [e for e in client if e.anomaly == EXTRA_TOOL_CALL]
        assert [text[e.span[0]:e.span[1]].strip("\n") for e in extra] == [SECOND, HERMES]
        assert [e.text.strip("\n") for e in extra] == [SECOND, HERMES]
        # no tool event of a later call reaches the client
        assert {e.index for e in client if e.kind in (TOOL_START, TOOL_ARGS, TOOL_CALL)} == {0}
        # the spans still tile the output
        pos = 0
        for e in client:
            assert e.span[0] == pos or e.span[0] == e.span[1] == pos, (e, pos)
            pos = e.span[1]
        assert pos == len(text)


def test_a_later_call_that_fails_is_text_as_unstreamed():
    text = "a\n" + CALL + "\n" + SECOND[:40]  # the output ends inside the second call
    events = run(text, [2] * len(text), start="content", stream_tools=True, tools_declared=True)
    assert any(e.kind == TOOL_START and e.index == 1 for e in events)
    client = first_call_only(events)
    res = result_of(client)
    assert [c.name for c in res.tool_calls] == ["f"]
    assert res.content.endswith(SECOND[:40]) and res.anomalies["unfinished_call"] == 1
    assert not [e for e in client if e.kind in (TOOL_START, TOOL_ARGS) and e.index == 1]
    unstreamed = result_of(run(text, [2] * len(text), start="content", stream_tools=False,
                               tools_declared=True))
    assert res.content == unstreamed.content


class Holding:
    """A filter that holds every event back until the end (as no real one does), to show what a
    chain owes the filters after one that lets events go at its end."""

    def __init__(self, tag: str) -> None:
        self.tag, self.held = tag, []

    def feed(self, events):
        self.held += events
        return []

    def finish(self):
        out, self.held = [*self.held, Event(CONTENT, self.tag, (0, 0))], []
        return out


class Tagging:
    """Appends its tag to every event's text; finishes with one event of its own."""

    def __init__(self, tag: str) -> None:
        self.tag = tag

    def feed(self, events):
        return [Event(e.kind, e.text + self.tag, e.span) for e in events]

    def finish(self):
        return [Event(CONTENT, "end" + self.tag, (0, 0))]


def texts(events):
    return [e.text for e in events]


def test_a_chain_applies_its_filters_in_order():
    evs = [Event(CONTENT, "a", (0, 1)), Event(CONTENT, "b", (1, 2))]
    chain = Chain([Tagging("1"), Tagging("2")])
    assert texts(chain.feed(evs)) == ["a12", "b12"]
    assert texts(chain.finish()) == ["end12", "end2"]
    first = Chain([Tagging("1")])
    first.add(Tagging("0"), first=True)
    first.add(Tagging("2"))
    assert texts(first.feed(evs[:1])) == ["a012"] and len(first) == 3


def test_what_a_filter_lets_go_at_its_end_goes_through_the_filters_after_it():
    chain = Chain([Holding("h"), Tagging("t")])
    assert chain.feed([Event(CONTENT, "a", (0, 1))]) == []
    assert texts(chain.finish()) == ["at", "ht", "endt"]
    assert texts(through([Holding("h"), Tagging("t")], [Event(CONTENT, "a", (0, 1))])) == [
        "at", "ht", "endt"]


def test_an_empty_chain_is_the_parser_itself():
    events = run("x\n</think>\n\n" + CALL, start="reasoning", stream_tools=True)
    chain = Chain()
    assert not chain and chain.feed(events) == events and chain.finish() == []
    assert through([], events) == events


def test_feeding_nothing_gives_nothing():
    for f in (CallsAsText(), FirstCallOnly()):
        assert f.feed([]) == [] and f.finish() == []
