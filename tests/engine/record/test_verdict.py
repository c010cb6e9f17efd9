"""engine/record/verdict.py: one verdict per request, naming the event that decided it.

The events are the real parser's over outputs whose ending is known; the finishes are the
engine's reasons as a recording holds them.
"""

from __future__ import annotations

from engine.parse.events import ANOMALY, TOOL_CALL
from engine.parse.reading import Reading
from engine.record import verdict as v
from engine.record.verdict import verdict_of

CALL = ("<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
        "</function>\n</tool_call>")


def events(text: str, start: str = "content"):
    parser = Reading(start=start, family="qwen-xml").parser(id_prefix="t")
    return parser.feed(text) + parser.finish()


def test_errors_are_told_apart_by_what_raised_them():
    assert verdict_of([], "error", error="chat template refused the request: no").kind == \
        v.TEMPLATE_REFUSED
    up = verdict_of([], "error", error="bad gateway", status=502)
    assert up.kind == v.UPSTREAM_ERROR and "HTTP 502" in up.detail
    assert verdict_of([], "error", error="boom", upstream=True).kind == v.UPSTREAM_ERROR
    assert verdict_of([], "error", error="RuntimeError: boom").kind == v.ENGINE_ERROR
    assert verdict_of([], None).kind == v.ENGINE_ERROR  # the file ends before the finish


def test_a_cancel_names_the_last_event_it_reached():
    evs = events("Some answer")
    out = verdict_of(evs, "cancelled")
    assert out.kind == v.CANCELLED and out.event == len(evs) - 1
    assert verdict_of([], "cancelled").event is None


def test_max_tokens_says_where_it_cut():
    evs = events("still thinking about", start="reasoning")
    assert verdict_of(evs, "length").kind == v.LENGTH_IN_REASONING
    evs = events("Sure.\n" + CALL[:40])
    out = verdict_of(evs, "length")
    assert out.kind == v.LENGTH_IN_CALL
    assert evs[out.event].kind == ANOMALY and evs[out.event].anomaly == "unfinished_call"
    assert verdict_of(events("Plain answer"), "length").kind == v.LENGTH


def test_a_stop_string_outranks_what_the_text_holds():
    out = verdict_of(events("Answer"), "stop", stop_sequence="###")
    assert out.kind == v.STOP_STRING and "'###'" in out.detail


def test_a_call_is_decided_by_its_call_event():
    evs = events("Let me look.\n" + CALL)
    out = verdict_of(evs, "stop")
    assert out.kind == v.CALLED_TOOL and evs[out.event].kind == TOOL_CALL
    assert out.span == evs[out.event].span and "get_weather" in out.detail
    evs = events("I should call it.\n\n" + CALL, start="reasoning")
    out = verdict_of(evs, "stop")
    assert out.kind == v.CALL_FROM_REASONING and evs[out.event].call.origin == "reasoning"


def test_every_kind_has_a_label():
    assert set(v.LABELS) == set(v.KINDS)
    assert v.Verdict(v.ANSWERED).label == "answered"
