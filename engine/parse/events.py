"""The parser's output vocabulary: events, tool calls and the parse result.

Owns the frozen dataclasses that cross every boundary after the parser (API adapters, GUI
panes, recordings, metrics). Pure data, no I/O; any thread may create or read them.

An `Event` says what a stretch of raw model output turned out to be. Every event carries the
raw `span` (start, end offsets in the model's output, in characters) that it consumed, and the
spans of one response tile its output exactly: concatenating `raw[span]` over the events gives
the output back. `text` is what the event means for its channel (reasoning or content text, a
tool-argument JSON fragment, a dropped tag's text), which is not always the raw text.

`merge()` joins neighbouring events of the same kind; two event streams for the same output
are equal once merged, whatever the chunking was. `result_of()` folds events into the final
`ParseResult`, so streamed and non-streamed replies are built from the same events. What a
request's policy delivers of them (one call per reply, calls as text) is engine/parse/filters.py.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field

REASONING = "reasoning"
CONTENT = "content"
MARKUP = "markup"  # tags and the newlines that belong to them: consumed, shown in raw view
TOOL_START = "tool_start"
TOOL_ARGS = "tool_args"
TOOL_CALL = "tool_call"
ANOMALY = "anomaly"
# A fact about the run, not an anomaly of the model: the guard (the lazy per-sequence grammar
# of engine/backends/llama/, issue 22) changed the token the sampler drew. Its own event kind,
# so nothing counts it among the anomalies (`result_of`, the metrics and the ledger count only
# `anomaly` events); zero-width, so the spans still tile the output.
GUIDED_TOKEN = "guided_token"
# A fact about the run too: the reasoning budget ended the reasoning (the engine appended the
# family's close, engine/backends/llama/budget.py). Zero-width at the end of the close's first
# token; its text says after how many reasoning tokens. Emitted by the pipeline from the
# tokens' `forced` marks, so a recording played back shows it where it happened live.
REASONING_BUDGET = "reasoning_budget"

KINDS = (REASONING, CONTENT, MARKUP, TOOL_START, TOOL_ARGS, TOOL_CALL, ANOMALY, GUIDED_TOKEN,
         REASONING_BUDGET)

# Anomaly kinds, in the order they are reported everywhere (CLI, metrics, GUI badges).
IMPLICIT_REASONING_END = "implicit_reasoning_end"
STRAY_THINK_END = "stray_think_end"
UNFINISHED_CALL = "unfinished_call"
MALFORMED_CALL = "malformed_call"
UNKNOWN_TOOL = "unknown_tool"
REPAIRED_CALL = "repaired_call"  # a call accepted only after a repair (its text says which)
# A complete call whose arguments break its declared tool's `parameters` schema; its text says
# what failed and where. Found after the parser, against the request's tools (engine/parse is
# standard-library only, jsonschema is not): engine/chat/arguments.py, applied by the pipeline.
# The call is still delivered as written. Counted with the parser's kinds: the model's fault.
INVALID_ARGUMENTS = "invalid_arguments"
# Only in pass-through mode (app/api/tap.py): the upstream's own parser left a call or a think
# tag in its reasoning or content. Not a parser outcome, so not among ANOMALY_KINDS.
UPSTREAM_LEAK = "upstream_leak"
# A complete call after the first in a reply to a request that allows one call (parallel calls
# off): not delivered (`FirstCallOnly`, engine/parse/filters.py). A request's policy, not a
# parser outcome, so not among ANOMALY_KINDS; its text is the call as the model wrote it.
EXTRA_TOOL_CALL = "extra_tool_call"
# Counted by the service when message content holds special tokens that would be parsed as
# control tokens (engine/chat/special.py): a finding about the prompt, not a parser outcome.
SPECIAL_TOKEN_IN_CONTENT = "special_token_in_content"
ANOMALY_KINDS = (
    IMPLICIT_REASONING_END,
    STRAY_THINK_END,
    UNFINISHED_CALL,
    MALFORMED_CALL,
    UNKNOWN_TOOL,
    REPAIRED_CALL,
    INVALID_ARGUMENTS,
)

# Kinds whose neighbours merge into one event (text-like streams). Tool starts, whole
# calls and anomalies are discrete and never merge.
_MERGEABLE = frozenset({REASONING, CONTENT, MARKUP, TOOL_ARGS})


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One complete tool call. `arguments` is the parsed object; `arguments_json` is exactly
    `json.dumps(arguments)`, the string the OpenAI dialect sends. `raw` is the call as the model
    wrote it (tags and the newlines before them included) and `origin` the channel it stood in:
    what a client that declared no tools gets instead of the call (`as_text`)."""

    id: str
    name: str
    arguments: dict
    index: int
    raw: str = ""
    origin: str = CONTENT

    @property
    def arguments_json(self) -> str:
        return json.dumps(self.arguments)

    def to_dict(self) -> dict:
        return {"id": self.id, "name": self.name, "arguments": self.arguments}


@dataclass(frozen=True, slots=True, init=False)
class Event:
    """One decided stretch of output.

    kind: one of KINDS.
    text: channel text (reasoning/content), the tag text (markup), a JSON fragment of the
        arguments (tool_args), the call's name (tool_start), or the raw text an anomaly concerns
        (for invalid_arguments, what failed and where).
    span: (start, end) character offsets of the raw output this event consumed.
    call: for tool_start/tool_args/tool_call, the call's index; the whole call on tool_call.
    anomaly: for kind == "anomaly", one of ANOMALY_KINDS.
    """

    kind: str
    text: str
    span: tuple[int, int]
    call: ToolCall | None = None
    anomaly: str | None = None
    index: int | None = None
    call_id: str | None = None

    # The parser creates one Event per token on the hot path; dataclass's frozen __init__
    # goes through object.__setattr__ per field (about 1 µs). __init__ is installed below and
    # writes the slots through their descriptors: same frozen semantics, a third of the cost.

    def to_dict(self) -> dict:
        d: dict = {"kind": self.kind, "text": self.text, "span": list(self.span)}
        if self.index is not None:
            d["index"] = self.index
        if self.call_id is not None:
            d["id"] = self.call_id
        if self.call is not None:
            d["call"] = self.call.to_dict()
        if self.anomaly is not None:
            d["anomaly"] = self.anomaly
        return d


def _fast_init(cls, names):
    sets = [cls.__dict__[n].__set__ for n in names]
    a, b, c, d, e, f, g = sets

    def __init__(self, kind, text, span, call=None, anomaly=None, index=None, call_id=None):
        a(self, kind)
        b(self, text)
        c(self, span)
        d(self, call)
        e(self, anomaly)
        f(self, index)
        g(self, call_id)

    cls.__init__ = __init__


_fast_init(Event, ("kind", "text", "span", "call", "anomaly", "index", "call_id"))


@dataclass(frozen=True, slots=True)
class ParseResult:
    reasoning: str
    content: str
    tool_calls: tuple[ToolCall, ...]
    finish_reason: str
    anomalies: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {
            "reasoning": self.reasoning,
            "content": self.content,
            "tool_calls": [c.to_dict() for c in self.tool_calls],
            "finish_reason": self.finish_reason,
            "anomalies": {k: self.anomalies.get(k, 0) for k in ANOMALY_KINDS}
            | {k: n for k, n in self.anomalies.items() if n and k not in ANOMALY_KINDS},
        }


def merge(events: Iterable[Event]) -> list[Event]:
    """Join neighbouring mergeable events of the same kind (and call index)."""
    out: list[Event] = []
    for ev in events:
        if out:
            last = out[-1]
            if (
                ev.kind == last.kind
                and ev.kind in _MERGEABLE
                and ev.index == last.index
                and last.span[1] == ev.span[0]
            ):
                out[-1] = Event(
                    last.kind,
                    last.text + ev.text,
                    (last.span[0], ev.span[1]),
                    None,
                    None,
                    last.index,
                    last.call_id,
                )
                continue
            if not ev.text and ev.span[0] == ev.span[1] and ev.kind in _MERGEABLE:
                continue
        out.append(ev)
    return out


def result_of(events: Iterable[Event], finish_reason: str = "stop") -> ParseResult:
    """Fold an event stream into the final result.

    `finish_reason` is the engine's ("stop" or "length"); it becomes "tool_calls" exactly
    when at least one call completed.
    """
    reasoning: list[str] = []
    content: list[str] = []
    calls: list[ToolCall] = []
    anomalies = dict.fromkeys(ANOMALY_KINDS, 0)
    for ev in events:
        k = ev.kind
        if k == CONTENT:
            content.append(ev.text)
        elif k == REASONING:
            reasoning.append(ev.text)
        elif k == TOOL_CALL and ev.call is not None:
            calls.append(ev.call)
        elif k == ANOMALY and ev.anomaly is not None:
            anomalies[ev.anomaly] = anomalies.get(ev.anomaly, 0) + 1
    return ParseResult(
        reasoning="".join(reasoning),
        content="".join(content),
        tool_calls=tuple(calls),
        finish_reason="tool_calls" if calls else finish_reason,
        anomalies=anomalies,
    )
