"""Finding requests: the request list's filter language, over row summaries.

Owns `parse` (a query → a `Query`, or a `QueryError` that says where it went wrong), `KEYS`
(every `~key` and what it tests), and `expression_for` (the query that shows a ledger cell's
requests). The summaries it reads, kept when a row's text is released, are
inspector/summaries.py's.

The language copies mitmproxy's filter expressions: `~key value` tests one field, `&` (also
written as nothing between two terms), `|` and `!` combine them, parentheses group; values are
Python regexes, matched case-insensitively, quoted with "…" or '…' where they hold spaces or
parentheses. A query without any `~` is plain text: each word (or "quoted phrase") must occur
in the prompt or the output, as typed, in any case. See docs/inspector.md, "Finding requests".

Qt-free and pure; the GUI thread calls it (the filter bar, the request list), and
bench/filter.py times it.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime

from engine.record.ledger import KIND_LABELS
from inspector.summaries import RowSummary

# ------------------------------------------------------------------------------- the language


class QueryError(ValueError):
    """A query that cannot be read; `at` is the character offset where it went wrong."""

    def __init__(self, message: str, at: int) -> None:
        super().__init__(message)
        self.at = at


Match = Callable[[RowSummary], bool]


@dataclass(frozen=True)
class Query:
    """A parsed query: `matches(summary)`; `text` as typed; the empty query matches all."""

    text: str
    matches: Match = field(repr=False)

    def filter(self, summaries: Iterable[RowSummary]) -> list[RowSummary]:
        return [s for s in summaries if self.matches(s)]


def _labels(values: Iterable[str], labels: dict[str, str]) -> tuple[str, ...]:
    return tuple(v for k in values for v in (k, labels.get(k, k)))


def _any(regex: re.Pattern, values: Iterable[str]) -> bool:
    return any(regex.search(v) for v in values)


def _time_of(text: str, at: int) -> Callable[[float], float]:
    """A `~time` bound: a time of day (HH:MM[:SS], compared with the row's own time of day)
    or a date and time (ISO), as a function of the row's time giving the bound."""
    try:
        if "T" in text or "-" in text or " " in text:
            stamp = datetime.fromisoformat(text).timestamp()
            return lambda _t: stamp
        parts = [int(p) for p in text.split(":")]
        if not 2 <= len(parts) <= 3 or not (0 <= parts[0] < 24 and 0 <= parts[1] < 60):
            raise ValueError(text)
        secs = parts[0] * 3600 + parts[1] * 60 + (parts[2] if len(parts) == 3 else 0)
    except ValueError:
        raise QueryError(f"~time: {text!r} is not HH:MM[:SS] or a date and time", at) from None

    def bound(t: float) -> float:
        lt = time.localtime(t)
        return t - (lt.tm_hour * 3600 + lt.tm_min * 60 + lt.tm_sec) + secs
    return bound


def _time_range(value: str, at: int) -> Match:
    if ".." not in value:
        raise QueryError("~time wants a range FROM..TO (either side may be left out)", at)
    lo_text, hi_text = (p.strip() for p in value.split("..", 1))
    lo = _time_of(lo_text, at) if lo_text else None
    hi = _time_of(hi_text, at) if hi_text else None

    def match(s: RowSummary) -> bool:
        t = s.created
        return (lo is None or t >= lo(t)) and (hi is None or t <= hi(t))
    return match


def _slot(value: str, at: int) -> Match:
    try:
        n = int(value)
    except ValueError:
        raise QueryError(f"~slot wants a number, not {value!r}", at) from None
    return lambda s: s.slot == n


def _text_match(rx: re.Pattern) -> Match:
    return lambda s: rx.search(s.text) is not None


def _prompt_match(rx: re.Pattern) -> Match:
    return lambda s: rx.search(s.text, 0, s.split) is not None


def _output_match(rx: re.Pattern) -> Match:
    return lambda s: rx.search(s.text, s.split + 1) is not None


# key → (what it tests, how a regex matches a summary); None: a flag that takes no value
_FIELDS: dict[str, tuple[str, Callable[[re.Pattern], Match] | None]] = {
    "t": ("prompt or output text", _text_match),
    "p": ("prompt text (its newest part)", _prompt_match),
    "o": ("output text", _output_match),
    "tool": ("a tool the output called", lambda rx: lambda s: _any(rx, s.tools)),
    "anomaly": ("an anomaly kind (name or label)",
                lambda rx: lambda s: _any(rx, _labels(s.anomalies, KIND_LABELS))),
    "verdict": ("why it stopped (kind or label)",
                lambda rx: lambda s: s.verdict is not None
                and _any(rx, (s.verdict.kind, s.verdict.label))),
    "finish": ("finish reason", lambda rx: lambda s: bool(rx.search(s.finish))),
    "model": ("model", lambda rx: lambda s: bool(rx.search(s.model))),
    "src": ("source (openai, anthropic, responses, gui, replay, rerun)",
            lambda rx: lambda s: bool(rx.search(s.source))),
    "origin": ('"live" or the recording it was played from',
               lambda rx: lambda s: bool(rx.search(s.origin))),
    "state": ("state (queued, generating, done, cancelled, error)",
              lambda rx: lambda s: bool(rx.search(s.status))),
    "id": ("request id", lambda rx: lambda s: bool(rx.search(s.id))),
}
_TEXT_KEYS = ("t", "p", "o")  # matched against the summaries' lowercased text
_FLAGS: dict[str, tuple[str, Match]] = {
    "anomalous": ("has any anomaly", lambda s: bool(s.anomalies)),
    "err": ("ended in an error", lambda s: s.status == "error"),
}
_SPECIAL = {"slot": ("the engine's slot (a number)", _slot),
            "time": ("time range FROM..TO: HH:MM[:SS] or a date and time", _time_range)}
KEYS: dict[str, str] = {**{k: d for k, (d, _f) in _FIELDS.items()},
                        **{k: d for k, (d, _m) in _SPECIAL.items()},
                        **{k: d for k, (d, _m) in _FLAGS.items()}}

_TOKEN = re.compile(r"""\s*(?:(?P<q>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*')|(?P<p>[()])|"""
                    r"""(?P<w>[^\s()"']+))""")


def _tokens(text: str) -> list[tuple[str, str, int]]:
    """(kind, text, offset): kind is "q" (quoted, unescaped), "w" (word), "op" or "(" / ")"."""
    out: list[tuple[str, str, int]] = []
    pos = 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None or m.end() == pos:
            if text[pos:].strip():
                raise QueryError("an unclosed quote", pos + len(text[pos:]) -
                                 len(text[pos:].lstrip()))
            break
        at = m.start(m.lastgroup)
        if m.lastgroup == "q":
            quoted = m.group("q")
            # Only the quote itself is escaped: a regex's own backslashes stay as typed.
            out.append(("q", quoted[1:-1].replace("\\" + quoted[0], quoted[0]), at))
        elif m.lastgroup == "p":
            out.append((m.group("p"), m.group("p"), at))
        else:
            word = m.group("w")
            while word.startswith("!") and len(word) > 1:  # "!~x": not, then ~x
                out.append(("op", "!", at))
                word, at = word[1:], at + 1
            out.append(("op" if word in ("&", "|", "!") else "w", word, at))
        pos = m.end()
    return out


def _regex(value: str, at: int, lowered: bool = False) -> re.Pattern:
    # The summaries' text is `lowered`: there a pattern with no capital letter needs no
    # IGNORECASE, which would cost Python's regex its fast scan for a literal prefix (ten
    # times slower over 10,000 rows). Other fields keep their case: IGNORECASE always.
    flags = 0 if lowered and value == value.lower() else re.IGNORECASE
    try:
        return re.compile(value, flags)
    except re.error as e:
        raise QueryError(f"bad regex {value!r}: {e}", at) from None


class _Parser:
    """Recursive descent: or := and ('|' and)*; and := not ('&'? not)*; not := '!' not |
    atom; atom := '(' or ')' | ~key [value] | word (a literal substring of the text)."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.toks = _tokens(text)
        self.i = 0

    def peek(self) -> tuple[str, str, int] | None:
        return self.toks[self.i] if self.i < len(self.toks) else None

    def take(self) -> tuple[str, str, int]:
        tok = self.peek()
        if tok is None:
            raise QueryError("the query ends too soon", len(self.text))
        self.i += 1
        return tok

    def parse(self) -> Match:
        m = self.or_()
        tok = self.peek()
        if tok is not None:
            raise QueryError(f"unexpected {tok[1]!r}", tok[2])
        return m

    def or_(self) -> Match:
        terms = [self.and_()]
        while (tok := self.peek()) is not None and tok[:2] == ("op", "|"):
            self.i += 1
            terms.append(self.and_())
        return terms[0] if len(terms) == 1 else lambda s: any(t(s) for t in terms)

    def and_(self) -> Match:
        terms = [self.not_()]
        while (tok := self.peek()) is not None and tok[1] != ")" and tok[:2] != ("op", "|"):
            if tok[:2] == ("op", "&"):
                self.i += 1
            terms.append(self.not_())
        return terms[0] if len(terms) == 1 else lambda s: all(t(s) for t in terms)

    def not_(self) -> Match:
        tok = self.peek()
        if tok is not None and tok[:2] == ("op", "!"):
            self.i += 1
            inner = self.not_()
            return lambda s: not inner(s)
        return self.atom()

    def atom(self) -> Match:
        kind, text, at = self.take()
        if kind == "(":
            inner = self.or_()
            close = self.peek()
            if close is None or close[0] != ")":
                raise QueryError("a '(' is never closed", at)
            self.i += 1
            return inner
        if kind in (")", "op"):
            raise QueryError(f"unexpected {text!r}", at)
        if kind == "w" and text.startswith("~"):
            return self.field(text[1:].lower(), at)
        return _words_match(text)  # a bare word or a quoted phrase: a literal

    def field(self, key: str, at: int) -> Match:
        if key in _FLAGS:
            return _FLAGS[key][1]
        if key not in _FIELDS and key not in _SPECIAL:
            raise QueryError(f"unknown key ~{key} (keys: "
                             + ", ".join(f"~{k}" for k in KEYS) + ")", at)
        tok = self.peek()
        if tok is None or tok[0] not in ("w", "q") or (tok[0] == "w" and
                                                       tok[1].startswith("~")):
            raise QueryError(f"~{key} wants a value", at)
        self.i += 1
        if key in _SPECIAL:
            return _SPECIAL[key][1](tok[1], tok[2])
        return _FIELDS[key][1](_regex(tok[1], tok[2], lowered=key in _TEXT_KEYS))


def _words_match(phrase: str) -> Match:
    low = phrase.lower()
    return lambda s: low in s.text


def _plain(text: str) -> Match:
    """Plain text: every word, or "quoted phrase", occurs in the prompt or the output."""
    parts = [m.group(1) if m.group(1) is not None else m.group(2)
             for m in re.finditer(r'"([^"]*)"|(\S+)', text)]
    terms = [_words_match(p) for p in parts if p]
    return lambda s: all(t(s) for t in terms)


def parse(text: str) -> Query:
    """`text` as a query (see the module docstring); raises QueryError."""
    stripped = text.strip()
    if not stripped:
        return Query(text, lambda _s: True)
    if not any(w.lstrip("!(").startswith("~") for w in stripped.split()):
        return Query(text, _plain(stripped))
    return Query(text, _Parser(text).parse())


def exact(value: str) -> str:
    """A regex matching `value` alone, quoted for a query where it must be."""
    rx = "^" + re.escape(value) + "$"
    return f'"{rx}"' if re.search(r"[\s()\"']", rx) else rx


# ------------------------------------------------------------------------------- the ledger

_FIGURE_KEYS = {"finish": "~finish", "anomaly": "~anomaly", "verdict": "~verdict"}


def expression_for(figure: tuple[str, str] | None, ids: Iterable[str] = ()) -> str:
    """The filter that shows a ledger cell's requests: the rows its figure counts
    (engine/record/ledger.py's `figure_of`), among `ids` where given (one group of several)."""
    terms = []
    if figure is not None:
        what, value = figure
        terms.append("~tool ." if what == "calls" else f"{_FIGURE_KEYS[what]} {exact(value)}")
    wanted = sorted(set(ids))
    if wanted:
        terms.append("~id " + exact_any(wanted))
    return " & ".join(terms)


def exact_any(values: Iterable[str]) -> str:
    """A regex matching any one of `values` whole, quoted for a query where it must be."""
    rx = "^(" + "|".join(re.escape(v) for v in values) + ")$"
    return f'"{rx}"' if re.search(r"[\s()\"']", rx) else rx
