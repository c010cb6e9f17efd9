"""Two runs of the same request, side by side: where they part, how their channels differ.

Owns `Side` (one run as compared: its tokens and its parse), `Parting` (the first token where
two runs part, with each side's probability of both tokens there when they were recorded),
`ChannelDiff`, `Comparison` (all of it, with the summary line the compare view and `prism
rerun` print) and the pairing of two recordings (`pairs`, `compare_sessions`: a rerun's
requests with the originals they name, else request by request in order), sorted by how much
changed. Pure: no I/O beyond what the caller read, no Qt; any thread may call it (the window
calls it on the GUI thread, `prism rerun` on the main thread).

Where two runs part is found on the token texts, not the ids: two models (or two quants of
different vocabularies) cut the same text into different tokens, and a different cut of the
same text is not a parting. So the streams are walked together; tokens that line up and read
the same are passed; where they do not line up, the shorter side takes its next tokens until
both sides end at the same character again, and the stretch is passed if it reads the same.
The first stretch that does not is the parting, at its first token on each side. For two runs
of one vocabulary that is exactly the first differing token.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Sequence
from dataclasses import dataclass

from engine.backends.base import Token
from engine.parse.events import result_of
from engine.record.recording import RecordedRequest, Session

CHANNELS = ("reasoning", "content")


@dataclass(frozen=True, slots=True)
class Side:
    """One run as compared. `result` is a `ParseResult.to_dict()` (the recorded one, else the
    output read again as it was recorded); `label` says which run it is, for the panes."""

    label: str
    tokens: tuple[Token, ...]
    result: dict
    finish: str = ""
    error: str | None = None
    id: str = ""

    @property
    def text(self) -> str:
        return "".join(t.text for t in self.tokens)

    @property
    def calls(self) -> list[dict]:
        return list(self.result.get("tool_calls") or ())

    @property
    def anomalies(self) -> dict[str, int]:
        return {k: int(n) for k, n in (self.result.get("anomalies") or {}).items() if n}


def side_of(rec: RecordedRequest, label: str = "") -> Side:
    """A recorded request as a side. A request the file ends before (no result) is read again
    from its tokens with its reading, as playback reads it."""
    finish, error = rec.outcome
    result = rec.result
    if result is None:
        reading = rec.reading
        parser = reading.parser(id_prefix="call")
        events = parser.feed(rec.text) + parser.finish()
        for f in reading.filters():
            events = f.feed(events) + f.finish()
        result = result_of(events, finish if finish in ("stop", "length") else "stop").to_dict()
    return Side(label=label or rec.id, tokens=rec.tokens, result=result, finish=finish,
                error=error, id=rec.id)


@dataclass(frozen=True, slots=True)
class Parting:
    """Where two runs part. `index_a` / `index_b`: the first token of the parting stretch on
    each side (the length of that side's stream when it ended there); `offset`: the
    characters both outputs share before it. `token_a` / `token_b` are those tokens (None for
    a side that ended). `p_*`: a side's probability of its own token and of the other side's
    there (exp of the recorded logprob), None where its top alternatives do not hold it."""

    index_a: int
    index_b: int
    offset: int
    token_a: Token | None
    token_b: Token | None
    p_a_own: float | None = None
    p_a_other: float | None = None
    p_b_own: float | None = None
    p_b_other: float | None = None

    def describe(self) -> str:
        def tok(t: Token | None, own: float | None, u: Token | None, other: float | None
                ) -> str:
            if t is None:
                return "(end)"
            probs = [f"p={own:.3f}" if own is not None else "",
                     f"p({u.text!r})={other:.3f}" if other is not None and u else ""]
            extra = ", ".join(p for p in probs if p)
            return repr(t.text) + (f" ({extra})" if extra else "")

        a, b = self.token_a, self.token_b
        return (f"part at token {self.index_a}/{self.index_b} (char {self.offset}): "
                f"A {tok(a, self.p_a_own, b, self.p_a_other)} vs "
                f"B {tok(b, self.p_b_own, a, self.p_b_other)}")


def _prob(tok: Token | None, text: str | None) -> float | None:
    if tok is None or text is None:
        return None
    for alt, logprob in tok.top:
        if alt == text:
            return math.exp(logprob)
    return None


def parting(a: Sequence[Token], b: Sequence[Token]) -> Parting | None:
    """The first token where two token streams part (see the module's docstring), or None
    when they read the same to the end."""
    i = j = offset = 0
    while i < len(a) and j < len(b):
        if a[i].text == b[j].text:
            offset += len(a[i].text)
            i, j = i + 1, j + 1
            continue
        si, sj = i, j
        ta, tb = a[i].text, b[j].text
        i, j = i + 1, j + 1
        # Different cuts of the same text: extend the shorter side until both end together.
        while len(ta) != len(tb) and (ta.startswith(tb) or tb.startswith(ta)):
            if len(ta) < len(tb):
                if i == len(a):
                    break
                ta += a[i].text
                i += 1
            else:
                if j == len(b):
                    break
                tb += b[j].text
                j += 1
        if ta != tb:
            return _parting(a, b, si, sj, offset)
        offset += len(ta)
    if i == len(a) and j == len(b):
        return None
    return _parting(a, b, i, j, offset)


def _parting(a: Sequence[Token], b: Sequence[Token], i: int, j: int, offset: int) -> Parting:
    ta = a[i] if i < len(a) else None
    tb = b[j] if j < len(b) else None
    return Parting(
        index_a=i, index_b=j, offset=offset, token_a=ta, token_b=tb,
        p_a_own=_prob(ta, ta.text if ta else None), p_a_other=_prob(ta, tb.text if tb else None),
        p_b_own=_prob(tb, tb.text if tb else None), p_b_other=_prob(tb, ta.text if ta else None),
    )


@dataclass(frozen=True, slots=True)
class ChannelDiff:
    """One channel of both runs: `at`, the first character where they differ (-1: the same);
    `ratio`, how alike they are (1.0 the same, difflib's measure); `opcodes`, difflib's
    (tag, a0, a1, b0, b1) edits turning side a's text into side b's, for the panes."""

    channel: str
    at: int
    ratio: float
    opcodes: tuple[tuple[str, int, int, int, int], ...] = ()

    @property
    def same(self) -> bool:
        return self.at < 0


def channel_diff(channel: str, a: str, b: str) -> ChannelDiff:
    if a == b:
        return ChannelDiff(channel, -1, 1.0)
    at = next((k for k, (x, y) in enumerate(zip(a, b, strict=False)) if x != y),
              min(len(a), len(b)))
    m = difflib.SequenceMatcher(None, a, b, autojunk=False)
    ops = tuple(op for op in m.get_opcodes() if op[0] != "equal")
    return ChannelDiff(channel, at, m.ratio(), ops)


def _call_args(calls: list[dict]) -> list:
    return [c.get("arguments") for c in calls]


@dataclass(frozen=True, slots=True)
class Comparison:
    """Two runs of one request compared. `change`: how much differs, for sorting (0 the
    same; the raw outputs' unlikeness, 0 to 1, plus 1 for other calls, 0.5 for other
    arguments to the same calls, 0.25 for another finish)."""

    a: Side
    b: Side
    parting: Parting | None
    channels: tuple[ChannelDiff, ...]
    same_calls: bool
    same_arguments: bool
    same_finish: bool
    change: float

    @property
    def identical(self) -> bool:
        return self.parting is None and self.same_calls and self.same_arguments \
            and self.same_finish

    def summary(self) -> str:
        """One line: where they part, then calls, arguments, finish and anomalies."""
        def yes(flag: bool) -> str:
            return "yes" if flag else "no"

        def anomalies(side: Side) -> str:
            found = side.anomalies
            return ", ".join(f"{k} {n}" for k, n in sorted(found.items())) or "none"

        head = "same output" if self.parting is None else self.parting.describe()
        finish = (f"yes ({self.a.finish})" if self.same_finish
                  else f"no ({self.a.finish} vs {self.b.finish})")
        return (f"{head} · same calls? {yes(self.same_calls)} · same arguments? "
                f"{yes(self.same_arguments)} · same finish? {finish} · anomalies: "
                f"{anomalies(self.a)} | {anomalies(self.b)}")

    def changed(self) -> str:
        """What changed, in a few words, for the list of a whole recording's pairs."""
        if self.identical:
            return "nothing"
        what = [f"{d.channel} {1 - d.ratio:.0%}" for d in self.channels if not d.same]
        if not self.same_calls:
            what.append("calls")
        elif not self.same_arguments:
            what.append("arguments")
        if not self.same_finish:
            what.append(f"finish {self.a.finish}→{self.b.finish}")
        return ", ".join(what) or "token cut only"


def compare(a: Side, b: Side) -> Comparison:
    part = parting(a.tokens, b.tokens)
    channels = tuple(channel_diff(ch, str(a.result.get(ch) or ""), str(b.result.get(ch) or ""))
                     for ch in CHANNELS)
    names_a = [c.get("name") for c in a.calls]
    names_b = [c.get("name") for c in b.calls]
    same_calls = names_a == names_b
    same_arguments = same_calls and _call_args(a.calls) == _call_args(b.calls)
    same_finish = (a.finish, a.result.get("finish_reason")) == \
        (b.finish, b.result.get("finish_reason"))
    text_change = 0.0 if part is None else \
        1.0 - difflib.SequenceMatcher(None, a.text, b.text, autojunk=False).ratio()
    change = text_change + (0.0 if same_calls else 1.0) + \
        (0.0 if same_arguments or not same_calls else 0.5) + (0.0 if same_finish else 0.25)
    return Comparison(a, b, part, channels, same_calls, same_arguments, same_finish, change)


def pairs(first: Session, second: Session) -> list[tuple[RecordedRequest, RecordedRequest]]:
    """The requests of two recordings paired: by the counterparts a rerun names (either way
    round), else in order, as far as the shorter goes."""
    by_id = {r.id: r for r in first.requests}
    named = [(by_id[r.counterpart], r) for r in second.requests if r.counterpart in by_id]
    if named:
        return named
    by_id = {r.id: r for r in second.requests}
    named = [(r, by_id[r.counterpart]) for r in first.requests if r.counterpart in by_id]
    if named:
        return named
    return list(zip(first.requests, second.requests, strict=False))


def compare_sessions(first: Session, second: Session, labels: tuple[str, str] = ("a", "b")
                     ) -> list[Comparison]:
    """Every pair of two recordings compared, the most changed first."""
    out = [compare(side_of(x, f"{labels[0]}:{x.id}"), side_of(y, f"{labels[1]}:{y.id}"))
           for x, y in pairs(first, second)]
    return sorted(out, key=lambda c: -c.change)
