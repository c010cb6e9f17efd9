"""Why a request stopped: one verdict per request, and the event that decided it.

Owns `Verdict`, the verdict kinds (`KINDS`, in the order the ledger lists them, with `LABELS`)
and `verdict_of`, which reads a request's parser events (as the window holds them, or a
re-parse of a recording) and its finish (the engine's reason, error, stop string, an upstream's
status). It is the inspector's reading of a request: nothing a client is sent changes.

The verdict is the first of these that holds, most decisive first: the template refused the
request; an upstream answered with an error; the engine failed; the server stopping cut it; the
client cancelled; the reply ran into `max_tokens` (in the reasoning, in a call, or in the
content); a stop string ended it; a call was left unfinished; a call was malformed; a call was
written but dropped (a tool the request did not declare, or a call past the first where one
call per reply is allowed); a call was recovered from the reasoning (written inside the
thinking); it called a tool; it answered after the reasoning budget closed its thinking; it
answered.
A kind a newer parser adds decides nothing here until it is given a place. Each verdict names
its deciding event by index into the events it was given (None where no event decided, as for
a cancel) and by raw span, so a click can show it.

Pure (no I/O, no Qt); any thread may call it: the ledger's (`prism stats`), the window's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from engine.parse.events import (
    ANOMALY,
    CONTENT,
    EXTRA_TOOL_CALL,
    IMPLICIT_REASONING_END,
    MALFORMED_CALL,
    MARKUP,
    REASONING,
    REASONING_BUDGET,
    TOOL_ARGS,
    TOOL_CALL,
    TOOL_START,
    UNFINISHED_CALL,
    UNKNOWN_TOOL,
    Event,
)

TEMPLATE_REFUSED = "template_refused"
UPSTREAM_ERROR = "upstream_error"
ENGINE_ERROR = "error"
CANCELLED = "cancelled"
SHUTDOWN = "shutdown"
LENGTH_IN_REASONING = "length_in_reasoning"
LENGTH_IN_CALL = "length_in_call"
LENGTH = "length"
STOP_STRING = "stop_string"
CALL_UNFINISHED = "call_unfinished"
CALL_MALFORMED = "call_malformed"
CALL_DROPPED = "call_dropped"
CALL_FROM_REASONING = "call_from_reasoning"
CALLED_TOOL = "called_tool"
ANSWERED = "answered"
BUDGET_CLOSED = "budget_closed"  # answered after the reasoning budget closed the thinking

KINDS = (ANSWERED, BUDGET_CLOSED, CALLED_TOOL, CALL_FROM_REASONING, CALL_UNFINISHED, CALL_MALFORMED,
         CALL_DROPPED, LENGTH_IN_REASONING, LENGTH_IN_CALL, LENGTH, STOP_STRING, CANCELLED,
         SHUTDOWN, UPSTREAM_ERROR, ENGINE_ERROR, TEMPLATE_REFUSED)
LABELS = {
    ANSWERED: "answered",
    BUDGET_CLOSED: "answered after the reasoning budget",
    CALLED_TOOL: "called a tool",
    CALL_FROM_REASONING: "call recovered from the reasoning",
    CALL_UNFINISHED: "call left unfinished",
    CALL_MALFORMED: "call malformed",
    CALL_DROPPED: "call written but dropped",
    LENGTH_IN_REASONING: "cut by max_tokens in the reasoning",
    LENGTH_IN_CALL: "cut by max_tokens in a call",
    LENGTH: "cut by max_tokens",
    STOP_STRING: "stopped at a stop string",
    CANCELLED: "cancelled by the client",
    SHUTDOWN: "cut by the server stopping",
    UPSTREAM_ERROR: "upstream error",
    ENGINE_ERROR: "engine error",
    TEMPLATE_REFUSED: "refused by the template",
}

# TemplateError's messages all begin so (engine/chat/template.py); a recorded refusal is an
# "error" finish whose error is one of them.
TEMPLATE_ERROR_PREFIX = "chat template"
_DROPPED = (UNKNOWN_TOOL, EXTRA_TOOL_CALL)
_CALL_KINDS = (TOOL_START, TOOL_ARGS, TOOL_CALL)


@dataclass(frozen=True, slots=True)
class Verdict:
    """kind: one of KINDS; detail: what decided it, in words; event: the deciding event's index
    in the events it was read from (None: no event decided); span: that event's raw span."""

    kind: str
    detail: str = ""
    event: int | None = None
    span: tuple[int, int] | None = None

    @property
    def label(self) -> str:
        return LABELS.get(self.kind, self.kind)


def _at(events: Sequence[Event], i: int | None, kind: str, detail: str) -> Verdict:
    if i is None:
        return Verdict(kind, detail)
    return Verdict(kind, detail, i, tuple(events[i].span))


def _first_anomaly(events: Sequence[Event], kinds: tuple[str, ...]) -> int | None:
    return next((i for i, ev in enumerate(events)
                 if ev.kind == ANOMALY and ev.anomaly in kinds), None)


def _last(events: Sequence[Event], skip: tuple[str, ...] = (MARKUP,)) -> int | None:
    """The last event that is not markup (the channel the output ended in)."""
    return next((i for i in range(len(events) - 1, -1, -1) if events[i].kind not in skip),
                None)


def _length(events: Sequence[Event]) -> Verdict:
    """Where `max_tokens` cut the reply: in a call (one left open), in the reasoning, or in
    the content."""
    open_call = _first_anomaly(events, (UNFINISHED_CALL,))
    if open_call is not None:
        return _at(events, open_call, LENGTH_IN_CALL, "max_tokens ended the reply inside a call")
    i = _last(events, (MARKUP, ANOMALY))
    if i is not None and events[i].kind in _CALL_KINDS and events[i].kind != TOOL_CALL:
        return _at(events, i, LENGTH_IN_CALL, "max_tokens ended the reply inside a call")
    if i is not None and events[i].kind == REASONING:
        return _at(events, i, LENGTH_IN_REASONING,
                   "max_tokens ended the reply before the reasoning closed")
    return _at(events, i, LENGTH, "max_tokens ended the reply")


def verdict_of(events: Sequence[Event], reason: str | None, *, error: str | None = None,
               stop_sequence: str | None = None, status: int | None = None,
               upstream: bool = False, refused: str = "", cancelled_by: str = "") -> Verdict:
    """The verdict on one request: its events, and the engine's finish `reason` ("stop",
    "length", "cancelled", "error"; "tool_calls" reads as "stop"; None: it never finished).
    `upstream`: an upstream server generated it, so an error is the upstream's. `refused`: the
    finish's mark of a request refused before generation ("template": by the chat template;
    engine/record/recording.py), else the error's own words say it. `cancelled_by`: a cancel's
    cause as recorded ("shutdown": the server stopping; "": the client)."""
    if reason is None:
        return Verdict(ENGINE_ERROR, "the recording ends before this request finished")
    if reason == "error":
        text = error or ""
        if refused == "template" or text.startswith(TEMPLATE_ERROR_PREFIX):
            return Verdict(TEMPLATE_REFUSED, text)
        if upstream or status is not None:
            return Verdict(UPSTREAM_ERROR, f"HTTP {status}: {text}" if status else text)
        return Verdict(ENGINE_ERROR, text)
    if reason == "cancelled" and cancelled_by == "shutdown":
        return _at(events, _last(events), SHUTDOWN, "the server stopped before the reply ended")
    if reason == "cancelled":
        return _at(events, _last(events), CANCELLED, "the client cancelled the request")
    if reason == "length":
        return _length(events)
    if stop_sequence is not None:
        return _at(events, _last(events), STOP_STRING, f"the stop string {stop_sequence!r}")
    for kinds, kind, detail in (
        ((UNFINISHED_CALL,), CALL_UNFINISHED, "a call the output ended inside"),
        ((MALFORMED_CALL,), CALL_MALFORMED, "a call whose text could not be read"),
        (_DROPPED, CALL_DROPPED, "a call the request's tools or policy did not let through"),
    ):
        i = _first_anomaly(events, kinds)
        if i is not None:
            ev = events[i]
            return _at(events, i, kind, f"{detail} ({ev.anomaly})")
    calls = [i for i, ev in enumerate(events) if ev.kind == TOOL_CALL]
    from_reasoning = next((i for i in calls if events[i].call is not None
                           and events[i].call.origin == REASONING), None)
    if from_reasoning is None and calls:
        implicit = _first_anomaly(events, (IMPLICIT_REASONING_END,))
        from_reasoning = calls[0] if implicit is not None else None
    if from_reasoning is not None:
        return _at(events, from_reasoning, CALL_FROM_REASONING,
                   "a call written inside the thinking, delivered as a call")
    if calls:
        name = events[calls[0]].call.name if events[calls[0]].call else ""
        return _at(events, calls[0], CALLED_TOOL, f"called {name}" if name else "a tool call")
    budget = next((i for i, ev in enumerate(events) if ev.kind == REASONING_BUDGET), None)
    if budget is not None:  # the engine ended the thinking, not the model
        return _at(events, budget, BUDGET_CLOSED,
                   f"the reasoning budget closed the thinking ({events[budget].text})")
    last = _last(events, (MARKUP, ANOMALY))
    content = next((i for i in range(len(events) - 1, -1, -1) if events[i].kind == CONTENT),
                   last)
    return _at(events, content, ANSWERED, "the model ended its answer")


def kind_of(result: dict | None, reason: str | None, *, error: str | None = None,
            stop_sequence: str | None = None, status: int | None = None,
            upstream: bool = False, refused: str = "", cancelled_by: str = "",
            budget_closed: bool = False) -> str | None:
    """The kind `verdict_of` decides, from a recorded result (`ParseResult.to_dict()`) where
    its counts decide it, in the same order; None where only the events can say (a reply cut
    by max_tokens: which channel it ended in). A finish that reads no event (an error, a
    cancel, a stop string) needs no result. For the ledger, which counts kinds: the events,
    and so the deciding one, are read only when asked for. A call in the reasoning is the
    `implicit_reasoning_end` the parser counts with it (engine/parse/parser_calls.py).
    `budget_closed`: the reasoning budget appended its close (the recording's `forced`
    tokens), which decides an answer as `verdict_of`'s `reasoning_budget` event does."""
    if reason is None or reason in ("error", "cancelled") or \
            (reason != "length" and stop_sequence is not None):
        return verdict_of((), reason, error=error, stop_sequence=stop_sequence, status=status,
                          upstream=upstream, refused=refused, cancelled_by=cancelled_by).kind
    if reason == "length" or not isinstance(result, dict):
        return None
    found, calls = result.get("anomalies"), result.get("tool_calls")
    if not isinstance(found, dict) or not isinstance(calls, list):
        return None
    for kinds, kind in (((UNFINISHED_CALL,), CALL_UNFINISHED), ((MALFORMED_CALL,), CALL_MALFORMED),
                        (_DROPPED, CALL_DROPPED)):
        if any(found.get(k) for k in kinds):
            return kind
    if calls:
        return CALL_FROM_REASONING if found.get(IMPLICIT_REASONING_END) else CALLED_TOOL
    return BUDGET_CLOSED if budget_closed else ANSWERED
