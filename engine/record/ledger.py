"""The ledger: what recordings say about a model, counted per group of replies.

Owns `Reply` (one recorded request as the ledger counts it, with its verdict), `Row` (one
group's figures), `replies_of` (a recording's replies), `ledger` (replies grouped by any of
`KEYS`), `LISTED` (the anomaly kinds every ledger shows, found or not) and `figure_of`
(what one line of the `table` counts, for the window's filter). Pure: no Qt, no I/O
beyond reading the recordings it is given; any thread may call it (`prism stats` on the main
thread, the window's ledger on the GUI thread).

What is counted, per reply:
- its finish reason as recorded ("tool_calls" where the recorded parse holds a call);
- its calls and anomalies as the recorded result says (what the run saw, upstream leaks and
  any kind a newer parser records included), and a special token in content where its request
  record marks one; a reply the file ends before has no result, so its tokens are re-parsed;
- its verdict (engine/record/verdict.py): its kind from the recorded result where the result
  decides it (`kind_of`: most replies, which then are never re-parsed for the table), else
  from a re-parse of its output as its reading says (a cut by max_tokens, a reply the file
  ends before); its deciding event from that re-parse, done when first asked for (`prism
  stats --requests`, a click in the window). The one-chunk parse gives the same events as the
  token-by-token one, only merged, so both say the same for a recording of this version;
- its time to first token and tokens/s from the recorded timings (from the token times where
  the timings are empty);
- its guided tokens: the tokens the call guard chose instead of the model's own draw (issue 22;
  their recorded `guided` marks). Not an anomaly: a fact about the run, counted apart.
A group's anomaly rates are occurrences per 1,000 replies, its guided tokens a sum and a rate
per 1,000 replies; its TTFT and tokens/s are medians.

Grouping keys come from the header's `model_info` (engine/record/model_info.py) and the
request's own family; a recording written before the header held them says "unknown".
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from engine.parse import families
from engine.parse.events import (
    ANOMALY,
    EXTRA_TOOL_CALL,
    IMPLICIT_REASONING_END,
    MALFORMED_CALL,
    REPAIRED_CALL,
    SPECIAL_TOKEN_IN_CONTENT,
    STRAY_THINK_END,
    TOOL_CALL,
    UNFINISHED_CALL,
    UNKNOWN_TOOL,
    UPSTREAM_LEAK,
    Event,
)
from engine.parse.filters import Chain
from engine.record.model_info import UNKNOWN, ModelInfo
from engine.record.reader import load_recording
from engine.record.recording import OutputSummary, RecordedRequest, Session
from engine.record.verdict import ANSWERED, BUDGET_CLOSED, Verdict, kind_of, verdict_of
from engine.record.verdict import KINDS as VERDICT_KINDS
from engine.record.verdict import LABELS as VERDICT_LABELS

KEYS = ("model", "quant", "family", "template", "engine")
# The kinds every ledger lists, in this order (issue 21): the parser's, then the request's own.
# Named, not sliced from ANOMALY_KINDS, so a kind added there is listed where it is found.
LISTED = (IMPLICIT_REASONING_END, STRAY_THINK_END, UNFINISHED_CALL, MALFORMED_CALL,
          REPAIRED_CALL, UNKNOWN_TOOL, EXTRA_TOOL_CALL, UPSTREAM_LEAK, SPECIAL_TOKEN_IN_CONTENT)
FINISHES = ("stop", "tool_calls", "length", "cancelled", "error")


@dataclass(frozen=True, slots=True)
class Reply:
    """One recorded request, counted. `keys` maps each of KEYS to its value; `kind` is its
    verdict's kind, what the ledger counts. The whole `verdict` (its detail and deciding event)
    is read when first asked for: a re-parse, where the recorded result decided the kind."""

    source: str  # the recording's path
    id: str
    keys: dict[str, str]
    finish: str
    calls: int
    anomalies: dict[str, int]
    kind: str
    ttft_ms: float | None = None
    tokens_per_s: float | None = None
    guided: int = 0  # tokens the call guard chose (not an anomaly)
    _verdict: Verdict | None = field(default=None, repr=False, compare=False)
    _late: Callable[[], Verdict] | None = field(default=None, repr=False, compare=False)

    @property
    def verdict(self) -> Verdict:
        if self._verdict is None:
            assert self._late is not None  # one of the two is always given
            object.__setattr__(self, "_verdict", self._late())
        return self._verdict


@dataclass(frozen=True, slots=True)
class Row:
    """One group's figures. `group` maps the grouping keys to this group's values."""

    group: dict[str, str]
    replies: int
    calls: int
    finishes: dict[str, int]
    anomalies: dict[str, int]  # occurrences, every kind in `ledger`'s kind list
    verdicts: dict[str, int]
    ttft_ms: float | None  # median
    tokens_per_s: float | None  # median
    ids: tuple[tuple[str, str], ...] = field(default=(), repr=False)  # (source, id) per reply
    guided: int = 0  # tokens the call guard chose, summed

    def per_1000(self, kind: str) -> float:
        return 1000.0 * self.anomalies.get(kind, 0) / self.replies if self.replies else 0.0

    @property
    def guided_per_1000(self) -> float:
        return 1000.0 * self.guided / self.replies if self.replies else 0.0

    def to_dict(self) -> dict:
        return {
            "group": dict(self.group), "replies": self.replies, "calls": self.calls,
            "finish_reasons": dict(self.finishes), "anomalies": dict(self.anomalies),
            "per_1000": {k: round(self.per_1000(k), 3) for k in self.anomalies},
            "verdicts": dict(self.verdicts), "ttft_ms_median": self.ttft_ms,
            "tokens_per_s_median": self.tokens_per_s, "guided_tokens": self.guided,
            "guided_tokens_per_1000": round(self.guided_per_1000, 3),
        }


# ------------------------------------------------------------------------------- replies


def _pack_family(name: str) -> str:
    """The family of a built-in pack, for files that name none per request."""
    try:
        from engine.chat.packs import builtin_packs

        spec = builtin_packs().get(name)
        return spec.family if spec is not None else "auto"
    except Exception:  # a pack we cannot read: "auto" reads both <tool_call> families
        return "auto"


def reparse(req: RecordedRequest, fallback_family: str = "auto") -> list[Event]:
    """The request's output read as its reading says (the family `fallback_family` where the
    file names one this version does not know), in one chunk."""
    reading = req.reading
    if not families.known(req.family):
        reading = replace(reading, family=fallback_family)
    parser, chain = reading.parser(id_prefix="ledger"), Chain(reading.filters())
    evs = chain.feed(parser.feed(req.text))
    return evs + chain.feed(parser.finish()) + chain.finish()


def _figures(req: RecordedRequest) -> tuple[float | None, float | None]:
    t = req.timings
    if t is not None and t.output_tokens:
        ttft = t.ttft_ms if t.ttft_ms > 0 else None
        rate = t.tokens_per_s or None
        if ttft is not None or rate is not None:
            return ttft, rate
    # Empty timings (an older or a hand-made file): the token times.
    out = req.summary
    if out is None:
        toks = req.tokens
        out = OutputSummary(n=len(toks), first_t=toks[0].t, last_t=toks[-1].t) if toks \
            else OutputSummary()
    if not out.n:
        return None, None
    span = out.last_t - out.first_t
    return out.first_t * 1000.0, ((out.n - 1) / span if out.n > 1 and span > 0 else None)


def reply_of(req: RecordedRequest, info: ModelInfo, source: str = "",
             fallback_family: str = "auto") -> Reply:
    """One recorded request as the ledger counts it (see the module docstring)."""
    result = req.result if isinstance(req.result, dict) else None
    upstream = info.engine.startswith("http")
    reason, error = req.outcome
    # Read again only where the recorded result does not say all that is counted: most
    # replies are not re-parsed at all unless their deciding event is asked for.
    kind = kind_of(result, req.finish, error=error, stop_sequence=req.stop_sequence,
                   status=req.status, upstream=upstream, refused=req.refused,
                   cancelled_by=req.cancelled_by, budget_closed=req.forced_tokens > 0)
    events = reparse(req, fallback_family) if result is None or kind is None else None
    if result is not None:
        anomalies = {str(k): int(n) for k, n in (result.get("anomalies") or {}).items() if n}
        calls = len(result.get("tool_calls") or ())
    else:
        anomalies = {}
        for ev in events:
            if ev.kind == ANOMALY and ev.anomaly:
                anomalies[ev.anomaly] = anomalies.get(ev.anomaly, 0) + 1
        calls = sum(1 for ev in events if ev.kind == TOOL_CALL)
    if req.content_specials and not req.special_escaped:
        anomalies.setdefault(SPECIAL_TOKEN_IN_CONTENT, 1)
    finish = req.finish or "unfinished"
    if reason in ("stop", "length") and calls:
        finish = "tool_calls"

    def judge(evs: list[Event] | None = events) -> Verdict:
        found = verdict_of(reparse(req, fallback_family) if evs is None else evs, req.finish,
                           error=error, stop_sequence=req.stop_sequence, status=req.status,
                           upstream=upstream, refused=req.refused,
                           cancelled_by=req.cancelled_by)
        if found.kind == ANSWERED and req.forced_tokens:
            # Read in one chunk, the output has no token marks: the budget's close is known
            # from the recording's `forced` tokens, as `kind_of` knows it.
            return Verdict(BUDGET_CLOSED, "the reasoning budget closed the thinking")
        return found

    verdict = judge() if events is not None else None
    family = req.reading.family if families.known(req.family) and req.family else info.family
    keys = {"model": info.file, "quant": info.quant, "family": family or UNKNOWN,
            "template": info.template, "engine": info.engine}
    ttft, rate = _figures(req)
    return Reply(source, req.id, keys, finish, calls, anomalies,
                 verdict.kind if verdict is not None else str(kind), ttft, rate,
                 req.guided_tokens, _verdict=verdict, _late=judge)


def replies_of(session: Session, source: str = "") -> list[Reply]:
    info = ModelInfo.from_header(session.header)
    fallback = _pack_family(str(session.header.get("pack", "")))
    return [reply_of(req, info, source, fallback) for req in session.requests]


def read_replies(paths: Iterable[Path | str]) -> list[Reply]:
    """Every reply of these recordings (a damaged one gives what precedes the damage)."""
    out: list[Reply] = []
    for path in paths:
        # Without Token objects: the ledger reads each output's text and token times only.
        out += replies_of(load_recording(path, tokens=False), str(path))
    return out


# ------------------------------------------------------------------------------- the ledger


def kinds_of(replies: Iterable[Reply]) -> tuple[str, ...]:
    """LISTED, then any other kind the replies hold (sorted)."""
    found = {k for r in replies for k in r.anomalies}
    return (*LISTED, *sorted(found - set(LISTED)))


def _median(values: Sequence[float]) -> float | None:
    return statistics.median(values) if values else None


def ledger(replies: Sequence[Reply], by: Sequence[str] = KEYS) -> list[Row]:
    """The replies grouped by the `by` keys (each one of KEYS), one row per group, in order
    of their first reply; every row lists every kind of `kinds_of(replies)`."""
    bad = [k for k in by if k not in KEYS]
    if bad:
        raise ValueError(f"cannot group by {', '.join(bad)} (keys: {', '.join(KEYS)})")
    kinds = kinds_of(replies)
    groups: dict[tuple[str, ...], list[Reply]] = {}
    for r in replies:
        groups.setdefault(tuple(r.keys[k] for k in by), []).append(r)
    rows = []
    for key, rs in groups.items():
        finishes: dict[str, int] = {}
        verdicts: dict[str, int] = {}
        anomalies = dict.fromkeys(kinds, 0)
        for r in rs:
            finishes[r.finish] = finishes.get(r.finish, 0) + 1
            verdicts[r.kind] = verdicts.get(r.kind, 0) + 1
            for k, n in r.anomalies.items():
                anomalies[k] += n
        rows.append(Row(
            group=dict(zip(by, key, strict=True)), replies=len(rs),
            calls=sum(r.calls for r in rs), finishes=finishes, anomalies=anomalies,
            verdicts=verdicts,
            ttft_ms=_median([r.ttft_ms for r in rs if r.ttft_ms is not None]),
            tokens_per_s=_median([r.tokens_per_s for r in rs if r.tokens_per_s is not None]),
            ids=tuple((r.source, r.id) for r in rs),
            guided=sum(r.guided for r in rs),
        ))
    return rows


# ------------------------------------------------------------------------------- as a table

# How each anomaly kind is named in a table (a kind not named here shows as itself).
KIND_LABELS = {
    IMPLICIT_REASONING_END: "implicit end of reasoning", STRAY_THINK_END: "stray closer",
    UNFINISHED_CALL: "unfinished call", MALFORMED_CALL: "malformed call",
    REPAIRED_CALL: "repaired call", UNKNOWN_TOOL: "unknown tool", EXTRA_TOOL_CALL: "extra call",
    UPSTREAM_LEAK: "upstream leak", SPECIAL_TOKEN_IN_CONTENT: "special token in content",
}


def _num(v: float | None, digits: int = 1) -> str:
    return "–" if v is None else f"{v:.{digits}f}"


def table(rows: Sequence[Row]) -> list[tuple[str, list[str]]]:
    """The ledger as (figure, one cell per row) lines, the layout `prism stats` prints and the
    window shows: the group's keys, replies and calls, each finish reason, each anomaly kind
    per 1,000 replies, the guided tokens (sum and per 1,000 replies), each verdict, the
    medians. Every row lists the same kinds."""
    if not rows:
        return []
    keys = list(rows[0].group)
    finishes = [f for f in FINISHES if any(r.finishes.get(f) for r in rows)]
    finishes += sorted({f for r in rows for f in r.finishes} - set(finishes))
    verdict_kinds = [k for k in VERDICT_KINDS if any(r.verdicts.get(k) for r in rows)]
    lines: list[tuple[str, list[str]]] = [(k, [r.group[k] for r in rows]) for k in keys]
    lines += [("replies", [str(r.replies) for r in rows]),
              ("calls", [str(r.calls) for r in rows])]
    lines += [(f"finish: {f}", [str(r.finishes.get(f, 0)) for r in rows]) for f in finishes]
    lines += [(f"{KIND_LABELS.get(k, k)} /1000", [_num(r.per_1000(k)) for r in rows])
              for k in rows[0].anomalies]
    # The guard's work, below the anomalies and apart from them: what Prism made the model
    # write, not what the model got wrong.
    lines += [("guided tokens", [str(r.guided) for r in rows]),
              ("guided tokens /1000", [_num(r.guided_per_1000) for r in rows])]
    lines += [(f"verdict: {VERDICT_LABELS[k]}", [str(r.verdicts.get(k, 0)) for r in rows])
              for k in verdict_kinds]
    lines += [("TTFT ms (median)", [_num(r.ttft_ms, 0) for r in rows]),
              ("tok/s (median)", [_num(r.tokens_per_s) for r in rows])]
    return lines


def figure_of(label: str) -> tuple[str, str] | None:
    """What a `table` line counts, as (what, value): ("finish", a finish reason), ("anomaly",
    a kind), ("verdict", a verdict kind) or ("calls", ""); None for a line that is no count of
    replies of one kind (the group's keys, replies, guided tokens, the medians). The window
    turns a clicked cell into a filter of the request list with it."""
    if label.startswith("finish: "):
        return "finish", label.removeprefix("finish: ")
    if label.startswith("verdict: "):
        text = label.removeprefix("verdict: ")
        kind = next((k for k, v in VERDICT_LABELS.items() if v == text), text)
        return "verdict", kind
    if label.endswith(" /1000") and not label.startswith("guided"):
        text = label.removesuffix(" /1000")
        return "anomaly", next((k for k, v in KIND_LABELS.items() if v == text), text)
    if label == "calls":
        return "calls", ""
    return None
