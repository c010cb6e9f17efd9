"""inspector/query.py and inspector/summaries.py: the filter language over row summaries, on
tracks parsed by the real parser, before and after the store releases their text."""

from __future__ import annotations

import time

import pytest

from engine.backends.base import Timings, Token
from engine.chat.request import ChatRequest, Message
from engine.record.ledger import figure_of
from inspector.query import KEYS, QueryError, expression_for, parse
from inspector.summaries import Index, reply_of, summarize
from inspector.tracks import Track, TrackStore

CALL = ("<tool_call>\n<function=read_file>\n<parameter=path>\nsrc/main.py\n</parameter>\n"
        "</function>\n</tool_call>")
UNFINISHED = "<tool_call>\n<function=write_file>\n<parameter=path>\nout"


def make(id: str, output: str, *, ask: str = "hello", model: str = "qwen3-0.6b",
         source: str = "openai", slot: int = 0, created: float | None = None,
         origin: str = "live", reason: str = "stop") -> Track:
    """A finished request: its output fed token by token and read by the real parser."""
    request = ChatRequest(messages=(Message("system", "You are terse."), Message("user", ask)))
    track = Track(id=id, source=source, model=model, origin=origin, request=request,
                  prompt=f"<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\n"
                         f"{ask}<|im_end|>\n<|im_start|>assistant\n", start_state="content")
    if created is not None:
        track.created = created
    t0 = time.perf_counter()
    track.add_tokens(Token(i, output[i:i + 4], t0 + i) for i in range(0, len(output), 4))
    events, result = track.reparse()
    track.add_events(events)
    track.finish(reason, Timings(output_tokens=len(track.tokens), slot=slot),
                 result=result if reason == "stop" else None)
    return track


def rows() -> list[Track]:
    day = time.mktime((2025, 3, 4, 0, 0, 0, 0, 0, -1))
    return [
        make("a", "Paris is sunny today.", ask="weather in Paris?", slot=0,
             created=day + 9 * 3600),
        make("b", CALL, ask="open the main file", model="gemma3-270m", source="anthropic",
             slot=1, created=day + 10 * 3600),
        make("c", UNFINISHED, ask="write it out", model="gemma3-270m", slot=1,
             created=day + 11 * 3600),
        make("d", UNFINISHED, ask="save the report", slot=2, source="responses",
             created=day + 12 * 3600 + 30 * 60),
        make("e", "a b c d e f g", ask="count", reason="length", slot=0, origin="run.jsonl",
             source="replay", created=day + 13 * 3600),
    ]


CASES = [
    ("", "abcde"),
    ("paris", "a"),  # plain words: prompt or output, any case
    ("PARIS sunny", "a"),
    ('"main file"', "b"),  # a quoted phrase
    ("main.py", "b"),  # a literal, not a regex: the dot is a dot
    ("~tool read_file", "b"),
    ("~tool write", "cd"),  # an unfinished call names its tool too
    ("~anomaly unfinished_call", "cd"),
    ("~anomaly 'unfinished call'", "cd"),  # the kind's label
    ("~anomaly unfinished_call & ~model gemma", "c"),
    ("~anomaly unfinished_call ~model GEMMA", "c"),  # a space is &
    ("~anomalous", "cd"),
    ("!~anomalous", "abe"),
    ("~verdict call_unfinished", "cd"),
    ("~verdict 'called a tool'", "b"),
    ("~verdict ^length$", "e"),
    ("~finish length", "e"),
    ("~finish tool_calls", "b"),
    ("~model gemma | ~src replay", "bce"),
    ("~src anthropic|responses", "bd"),  # a regex value
    ("~origin run\\.jsonl", "e"),
    ("~slot 1", "bc"),
    ("!(~slot 1 | ~slot 2)", "ae"),
    ("~time 10:00..12:00", "bc"),
    ("~time 12:00..", "de"),
    ("~time ..9:30", "a"),
    ("~time 2025-03-04T10:30..2025-03-04T12:45", "cd"),
    ("~id ^[ab]$", "ab"),
    ("~state done & ~o sunny", "a"),
    ("~p 'main file'", "b"),
    ("~t 'sunny|report'", "ad"),
    ("~err", ""),
]


@pytest.mark.parametrize(("text", "expected"), CASES)
def test_each_field_and_operator_over_a_fixed_set_of_rows(text, expected):
    index = Index()
    summaries = [index.update(t) for t in rows()]
    query = parse(text)
    assert "".join(s.id for s in query.filter(summaries)) == expected


@pytest.mark.parametrize(("text", "at", "words"), [
    ("~nope x", 0, "unknown key ~nope"),
    ("~model", 0, "~model wants a value"),
    ("(~model a", 0, "never closed"),
    ("~model a )", 9, "unexpected ')'"),
    ("~t '(unclosed'", 3, "bad regex"),
    ("~slot two", 6, "wants a number"),
    ("~time 25:00..", 6, "not HH:MM"),
    ("~time 10:00", 6, "FROM..TO"),
    ('~t "open', 3, "unclosed quote"),
    ("~model a |", 10, "ends too soon"),
])
def test_a_bad_query_says_where_and_why(text, at, words):
    with pytest.raises(QueryError) as e:
        parse(text)
    assert e.value.at == at and words in str(e.value)


def test_every_key_is_documented_and_usable():
    for key in KEYS:
        parse(f"~{key} 1:00..2:00" if key == "time" else f"~{key} 1")


def test_a_released_row_is_found_by_its_words_and_keeps_its_verdict():
    store = TrackStore(max_documents=2)
    index = Index()
    tracks = []
    for i, t in enumerate(rows()):
        store.add(t)
        index.update(t)  # the frame that saw it finished
        tracks.append(t)
        if i == 0:
            first = t
    assert first.released and first.raw == "" and first.prompt == ""
    summary = index.update(first)  # released since: its words are the summary's
    assert summary.output == "paris is sunny today." and "weather in paris" in summary.prompt
    assert summary.verdict is not None and summary.verdict.kind == "answered"
    assert [s.id for s in parse("sunny").filter(index.update(t) for t in tracks)] == ["a"]
    assert [s.id for s in parse("~tool read_file").filter(index.update(t) for t in tracks)] \
        == ["b"]
    # Without the summary made before the release, its words were gone (and no recording).
    assert summarize(first).output == ""


def test_a_ledger_cell_is_a_filter_of_its_requests():
    summaries = [summarize(t) for t in rows()]
    unfinished = figure_of("unfinished call /1000")
    assert unfinished == ("anomaly", "unfinished_call")
    assert expression_for(unfinished) == "~anomaly ^unfinished_call$"
    assert figure_of("verdict: call left unfinished") == ("verdict", "call_unfinished")
    assert figure_of("finish: length") == ("finish", "length")
    assert figure_of("replies") is None and figure_of("guided tokens /1000") is None
    both = expression_for(figure_of("finish: stop"), ["a", "c"])
    assert both == '~finish ^stop$ & ~id "^(a|c)$"'
    assert [s.id for s in parse(both).filter(summaries)] == ["a", "c"]
    assert [s.id for s in parse(expression_for(figure_of("calls"))).filter(summaries)] == \
        ["b", "c", "d"]
    assert expression_for(None) == ""


def test_the_window_s_own_requests_count_as_ledger_replies():
    b = summarize(rows()[1])
    reply = reply_of(b)
    assert (reply.finish, reply.calls, reply.kind) == ("tool_calls", 1, "called_tool")
    assert reply.keys["model"] == "gemma3-270m" and reply.source == "live (this window)"
    running = Track(id="r")
    assert reply_of(summarize(running)) is None
