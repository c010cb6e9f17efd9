"""Reading session recordings (the format: engine/record/recording.py).

Owns `read_session` (a whole file, strictly or up to its first damage, tokens kept or only
their text) and the one loader every player uses: `is_recording` tells a recording from a plain
text output by its header, `load_recording` reads what precedes any damage (with a warning), for
replay to clients and playback in the window alike; and the token line's fast match and the
per-request builder that engine/record/index.py reads single requests with. Pure functions of
a file; called from whichever thread opens one (the window's loader, the server at start, the
CLI verbs).
"""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path

from engine.backends.base import Token
from engine.parse.reading import Reading
from engine.record.forensics import prefix_from_dict
from engine.record.recording import (
    FORMAT,
    VERSION,
    OutputSummary,
    RecordedRequest,
    RecordingError,
    Session,
    api_and_family,
    old_reading,
    timings_from_dict,
)

log = logging.getLogger("prism")


# A token record exactly as `Recorder.token` lays it out without alternatives: a file is
# mostly these, and matching one costs a third of decoding it (`prism stats` reads hundreds of
# thousands). JSON's own grammar for each value (a string without control characters, whose
# escapes are JSON's; integers; a number), so a line matched reads as json.loads reads it; any
# other line (another layout, alternatives, damage) is decoded, and damage named, as before.
_STR = r'[^"\\\x00-\x1f]*(?:\\(?:["\\/bfnrt]|u[0-9a-fA-F]{4})[^"\\\x00-\x1f]*)*'
_INT = r"-?(?:0|[1-9][0-9]*)"
_TOKEN_LINE = re.compile(
    rf'\{{"type": "token", "id": "({_STR})", "i": {_INT}, "tok": ({_INT}), '
    rf'"text": "({_STR})", "t": ({_INT}(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?)\}}')


class _Builder:
    """Collects records per request id, in the order requests appeared. With `keep_tokens`
    off, a token record is checked as closely but kept as (text, t) only: no Token object
    per token for a reader that needs the text (`prism stats`)."""

    def __init__(self, keep_tokens: bool = True) -> None:
        self.header: dict = {}
        self.order: list[str] = []
        self.fields: dict[str, dict] = {}
        self.tokens: dict[str, list] = {}
        self.guided: dict[str, int] = {}  # guided tokens per request, read without Tokens
        self.forced: dict[str, int] = {}  # the budget's close tokens, likewise
        self.keep_tokens = keep_tokens

    def token_line(self, line: str) -> bool:
        """Take a token record in the recorder's layout (`_TOKEN_LINE`) for a known request;
        False for any other line, which `add` then reads (and finds any damage in)."""
        m = _TOKEN_LINE.fullmatch(line)
        if m is None:
            return False
        rid, tok, text, t = m.groups()
        if "\\" in rid:
            rid = json.loads(f'"{rid}"')
        toks = self.tokens.get(rid)
        if toks is None:
            return False
        if "\\" in text:
            text = json.loads(f'"{text}"')
        toks.append(Token(int(tok), text, float(t)) if self.keep_tokens else (text, float(t)))
        return True

    def add(self, rec: dict) -> None:
        kind = rec.get("type")
        if kind == "token":  # first: nearly every record is one
            toks = self._known(rec)
            top = rec.get("top")  # most tokens have none: no generator for them
            top = tuple((str(a), float(b)) for a, b in top) if top else ()
            guided = rec.get("guided")  # the call guard's mark (absent: the model's own)
            guided = None if guided is None else str(guided)
            if self.keep_tokens:
                toks.append(Token(int(rec["tok"]), str(rec["text"]), float(rec["t"]), top,
                                  guided, rec.get("forced") is True))
            else:
                int(rec["tok"])  # the same checks as a Token's, so the same damage is found
                toks.append((str(rec["text"]), float(rec["t"])))
                if guided is not None:
                    rid = str(rec["id"])
                    self.guided[rid] = self.guided.get(rid, 0) + 1
                if rec.get("forced") is True:
                    rid = str(rec["id"])
                    self.forced[rid] = self.forced.get(rid, 0) + 1
        elif kind == "request":
            rid = str(rec["id"])
            if rid in self.fields:
                raise ValueError(f"duplicate request id {rid!r}")
            names = api_and_family(rec)
            if isinstance(rec.get("reading"), dict):
                reading = Reading.from_dict(rec["reading"])
                names["family"] = reading.family
            else:
                reading = old_reading(rec, names["family"])
            fields = {
                "id": rid,
                "request": dict(rec["request"]),
                "prompt": str(rec["prompt"]),
                "reading": reading,
                **names,
                "t": float(rec.get("t", 0.0)),
                "content_specials": tuple((int(a), int(b))
                                          for a, b in rec.get("content_specials") or ()),
                "special_escaped": bool(rec.get("special_escaped", False)),
            }
            # Register only once every field parsed, so a bad record leaves no trace.
            self.order.append(rid)
            self.tokens[rid] = []
            self.fields[rid] = fields
        elif kind == "finish":
            self._known(rec)
            f = self.fields[str(rec["id"])]
            f["finish"] = str(rec["reason"])
            f["timings"] = timings_from_dict(rec.get("timings") or {})
            f["result"] = rec.get("result")
            f["error"] = rec.get("error")
            stop, status = rec.get("stop_sequence"), rec.get("status")
            f["stop_sequence"] = None if stop is None else str(stop)
            f["status"] = None if status is None else int(status)
            f["prefix"] = prefix_from_dict(rec.get("prefix"))
            f["refused"] = str(rec.get("refused") or "")
            f["cancelled_by"] = str(rec.get("cancelled_by") or "")
        elif kind == "counterpart":
            self._known(rec)
            self.fields[str(rec["id"])]["counterpart"] = str(rec["of"])
        # Unknown record types are skipped on purpose (forward compatible within a version).

    def _known(self, rec: dict) -> list:
        rid = str(rec["id"])
        toks = self.tokens.get(rid)
        if toks is None:
            raise ValueError(f"{rec.get('type')} record for unknown request {rid!r}")
        return toks

    def session(self) -> Session:
        if self.keep_tokens:
            reqs = tuple(RecordedRequest(tokens=tuple(self.tokens[rid]), **self.fields[rid])
                         for rid in self.order)
        else:
            reqs = tuple(RecordedRequest(summary=_summary(self.tokens[rid],
                                                          self.guided.get(rid, 0),
                                                          self.forced.get(rid, 0)),
                                         **self.fields[rid])
                         for rid in self.order)
        return Session(header=dict(self.header), requests=reqs)


def _summary(pieces: list[tuple[str, float]], guided: int = 0,
             forced: int = 0) -> OutputSummary:
    if not pieces:
        return OutputSummary()
    return OutputSummary("".join(p[0] for p in pieces), len(pieces), pieces[0][1],
                         pieces[-1][1], guided, forced)


def read_session(path: Path | str, *, strict: bool = True, tokens: bool = True) -> Session:
    """Read a recording. A damaged line raises `RecordingError` (with `.line` and
    `.partial`); with strict=False the partial session is returned instead. With
    tokens=False each request's output is read as its `summary`, without Token objects (its
    `tokens` are empty): what the ledger needs, at a fraction of the cost."""
    b = _Builder(keep_tokens=tokens)
    with Path(path).open("r", encoding="utf-8", errors="replace", newline="\n") as f:
        data = f.read()
    lines = data.split("\n")
    ends_cleanly = lines[-1] == ""
    if ends_cleanly:
        lines.pop()
    if not lines:
        return _fail("empty file, no header", 1, b, strict)
    for n, line in enumerate(lines, start=1):
        if n > 1 and b.token_line(line):
            continue  # a token record as the recorder writes it: matched, not decoded
        last = n == len(lines)
        if not line.strip() and not (last and not ends_cleanly):
            continue  # blank lines are harmless
        try:
            rec = json.loads(line)
            if not isinstance(rec, dict):
                raise ValueError("a record must be a JSON object")
        except ValueError as e:
            if last and not ends_cleanly:
                why = "truncated record (the file ends mid-line, was the writer killed?)"
            else:
                why = f"not a JSON object: {e}"
            return _fail(why, n, b, strict)
        if n == 1:
            if rec.get("format") != FORMAT:
                return _fail(f"not a {FORMAT} file (format={rec.get('format')!r})", n, b, strict)
            if rec.get("version") != VERSION:
                return _fail(
                    f"unsupported version {rec.get('version')!r} (this reader knows {VERSION})",
                    n,
                    b,
                    strict,
                )
            b.header = rec
            continue
        try:
            b.add(rec)
        except (KeyError, TypeError, ValueError) as e:
            detail = f"missing field {e}" if isinstance(e, KeyError) else str(e)
            return _fail(f"bad {rec.get('type', '?')} record: {detail}", n, b, strict)
    return b.session()


def is_recording(path: Path | str) -> bool:
    """Whether a file is a Prism recording: its first line is a header object naming the
    format (whatever the file is called); anything else is taken as plain text by readers."""
    with Path(path).open("rb") as f:
        first = f.readline(4096)
    try:
        head = json.loads(first)
    except ValueError:
        return False
    return isinstance(head, dict) and head.get("format") == FORMAT


def load_recording(path: Path | str, *, tokens: bool = True) -> Session:
    """Read a recording for playing it (to clients or in the window): a damaged file gives
    what precedes the damage, with a warning logged, rather than nothing. `tokens`: as
    `read_session`'s."""
    try:
        return read_session(path, tokens=tokens)
    except RecordingError as e:
        log.warning("[prism] %s: %s; playing what precedes it", path, e)
        return e.partial


def _fail(message: str, line: int, b: _Builder, strict: bool) -> Session:
    partial = b.session()
    if strict:
        raise RecordingError(message, line, partial)
    return partial
