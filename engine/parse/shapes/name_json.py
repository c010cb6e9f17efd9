"""The name-json shape: a call's name between markers, its arguments one JSON object; its reader,
writer and forced-call grammar from one `CallFormat`.

Owns `NameJsonCall` (the reader, configured by class attributes made from a record),
`name_json_reader`, `openers`, `opener_test`, `args_opener` (the opener test of a call whose
arguments must follow its name), `name_of`, `write_call` and `grammar_call`. Run by
whichever thread drives the parser (the grammar on the service's thread).

    <｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{…}<｜tool▁call▁end｜>              (DeepSeek V3.1)
    <|tool_call_begin|>functions.NAME:0<|tool_call_argument_begin|>{…}<|tool_call_end|>  (Kimi)
    [TOOL_CALLS]NAME[ARGS]{…}                                                  (Mistral)

The reader is the framed readers' machinery (engine/parse/families/framed.py): the markers are
read with the whitespace between them optional, the arguments by the Hermes JSON scanner
(`framed.JsonArgs`: a closer inside a string never ends them, the fragments stream as canonical
`json.dumps` once the name is known). Several calls share one section: each call opener is its
own call, and the section's closer is consumed by the call before it. A call whose arguments
are complete is accepted without its closer (at the end of output, or before other text, which
is the channel's). What a record reads but never writes: the name's prefix and index are
optional (`functions.`, `:0`, the model's own `functions.NAME:0` kept as the call's id), a call
id after its tag (`[CALL_ID]…`), a type word before the name (`typed`) and a code fence around
the arguments (`fence`).
"""

from __future__ import annotations

import json
import re

from engine.parse.families.common import FULL, NONE, PREFIX, Match, match_literal, skip_ws
from engine.parse.families.framed import FramedBody, name_at
from engine.parse.shapes.record import CallFormat

NAME_CHARS = "_-.:"
_FENCE = "```"
_FENCE_HEAD = re.compile(r"```[A-Za-z]*[ \t]*\r?\n?[ \t]*")
_MAX_FENCE = 16

(_BEGIN, _NAME, _ID, _NAME_END, _AFTER_NAME, _TYPED_NAME, _FENCE_OPEN, _ARGS, _FENCE_CLOSE, _END,
 _SECTION) = range(11)


def name_of(prefix: str, index: str, word: str) -> str:
    """The call's name in the word a model wrote: without `prefix` and `index` + digits
    (`functions.get_weather:0` -> `get_weather`)."""
    name = word.removeprefix(prefix) if prefix else word
    if index:
        head, sep, tail = name.rpartition(index)
        if sep and head and tail.isdigit():
            return head
    return name


class NameJsonCall(FramedBody):
    """Each marker attribute is a tuple of spellings (stripped; any of them is read)."""

    CALL: tuple[str, ...] = ()  # a call's opener, read after the section's (optional)
    NAME_CHARS = NAME_CHARS
    PREFIX = ""
    INDEX = ""
    ID_TAG = ""
    NAME_END: tuple[str, ...] = ()  # "" among them: the name may end at anything else
    CALL_END: tuple[str, ...] = ()
    SECTION_END: tuple[str, ...] = ()
    TYPED = False
    FENCE = False

    def __init__(self, schemas: dict, stream: bool) -> None:
        super().__init__(schemas, stream)
        self._st = _BEGIN
        self._word_seen = ""  # the word before the name's end: the name, or (typed) the type
        self._typed = False
        self._fenced = False

    def _any(self, lits: tuple[str, ...]) -> Match:
        """Consume the longest of `lits` at the buffer's start (FULL); PREFIX while the buffer
        ends inside one of them (a longer one may still come); NONE."""
        best, hit = NONE, ""
        for lit in lits:
            m = match_literal(self._buf, 0, lit)
            if m == PREFIX:
                return PREFIX
            if m == FULL and len(lit) > len(hit):
                best, hit = FULL, lit
        if best == FULL:
            self._eat(len(hit))
        return best

    def _name(self, word: str) -> None:
        name = name_of(self.PREFIX, self.INDEX, word)
        if name != word:  # the model's own id (`functions.NAME:IDX`): kept
            self.call_id = word
        self._start(name)

    def _step(self, st: int, eof: bool) -> bool:
        if st == _BEGIN:
            if not self._ws():
                return False
            if self.CALL and self._any(self.CALL) == PREFIX:
                return False
            self._st = _NAME
        elif st == _NAME:  # whitespace may stand between the call's tag and its name
            if not self._ws():
                return False
            word = self._word(self.NAME_CHARS)
            if not word:
                return False
            self._word_seen = word
            self._st = _ID if self.ID_TAG else _NAME_END
        elif st == _ID:  # an optional `[CALL_ID]id` before the name's end
            b = self._buf
            m = match_literal(b, 0, self.ID_TAG)
            if m == PREFIX:
                return False
            if m == FULL:
                k = len(self.ID_TAG)
                while k < len(b) and (b[k].isalnum() or b[k] in self.NAME_CHARS):
                    k += 1
                if k == len(b):
                    return False  # the id may go on
                self.call_id = b[len(self.ID_TAG):k] or None  # the model's own: kept
                self._eat(k)
            self._st = _NAME_END
        elif st == _NAME_END:
            if not self._ws():
                return False
            m = self._any(self.NAME_END)
            if m == PREFIX:
                return False
            if m == NONE and "" not in self.NAME_END:
                self._fail("expected " + self.NAME_END[0])
                return False
            self._st = _AFTER_NAME
        elif st == _AFTER_NAME:  # the arguments, a fence, or (typed) the name after a type
            if not self._ws():
                return False
            c = self._buf[0]
            if c == "{" or (self.FENCE and c == "`"):
                self._name(self._word_seen)
                self._st = _ARGS if c == "{" else _FENCE_OPEN
            elif self.TYPED and not self._typed and (c.isalnum() or c in self.NAME_CHARS):
                self._typed = True
                self._st = _TYPED_NAME
            else:
                self._fail("expected arguments")
        elif st == _TYPED_NAME:
            word = self._word(self.NAME_CHARS)
            if not word:
                return False
            self._word_seen = word
            self._st = _AFTER_NAME
        elif st == _FENCE_OPEN:  # ```json, then the arguments on the next line
            b = self._buf
            k = b.find("{", 0, _MAX_FENCE + 1)
            if k < 0:
                if len(b) > _MAX_FENCE or not _FENCE.startswith(b[:3]):
                    self._fail("expected arguments")
                return False
            if not _FENCE_HEAD.fullmatch(b[:k]):
                self._fail("expected arguments")
                return False
            self._eat(k)
            self._fenced = True
            self._st = _ARGS
        elif st == _ARGS:
            if not self._args(eof):
                return False
            self._st = _FENCE_CLOSE if self._fenced else _END
        elif st == _FENCE_CLOSE:  # the fence's end is optional; nothing after it at eof
            if not self._ws() or (m := self._lit(_FENCE)) == PREFIX:
                if eof:
                    self.done, self.end = True, self._pos
                return False
            if m == NONE:
                self.done, self.end = True, self._pos
                return False
            self._st = _END
        elif st == _END:
            if self.CALL_END and self._close(self.CALL_END, eof) != FULL:
                return False  # undecided, or no closer: the call is whole, the rest is text
            if not self.SECTION_END:
                self.done, self.end = True, self._pos
                return False
            self.done = False
            self._st = _SECTION
        else:  # the section's closer, or the whitespace before its next call is this one's
            if self._close_at < 0:
                self._close_at = self._pos
            self._ws()
            m = NONE
            for c in self.CALL:
                m = max(m, match_literal(self._buf, 0, c))
            if m == FULL:
                self.done, self.end, self._close_at = True, self._pos, -1
                return False
            if m == PREFIX and not eof:
                return False
            self._close(self.SECTION_END, eof)
            return False
        return True


# --- from a record ------------------------------------------------------------------------------


def name_json_reader(fmt: CallFormat) -> type[NameJsonCall]:
    """The reader of `fmt`'s calls (every spelling of it)."""
    ends = fmt.spelled("name_end")
    attrs = {
        "CALL": fmt.spelled("call") if fmt.section else (),
        "NAME_CHARS": "".join(c for c in NAME_CHARS if not any(e.startswith(c) for e in ends)),
        "PREFIX": fmt.name_prefix,
        "INDEX": fmt.index,
        "ID_TAG": fmt.id_tag,
        "NAME_END": fmt.spelled("name_end", empty=True),
        "CALL_END": fmt.spelled("call_end"),
        "SECTION_END": fmt.spelled("section_end"),
        "TYPED": fmt.typed,
        "FENCE": fmt.fence,
    }
    return type("CallParser", (NameJsonCall,), attrs)


def openers(fmt: CallFormat) -> tuple[str, ...]:
    """The call openers the parser scans for: each spelling's section, then its call."""
    return fmt.tag_openers()


def opener_test(fmt: CallFormat):
    """`match_opener(text, i)` for the format: after a section opener, a call opener; after a
    call opener, a name (its id after `id_tag`), then whitespace and the name's end."""
    reader = name_json_reader(fmt)
    calls, ends, chars = reader.CALL, tuple(e for e in reader.NAME_END if e), reader.NAME_CHARS

    def match_opener(text: str, i: int) -> Match:
        best = NONE
        for c in calls:
            best = max(best, match_literal(text, i, c))
        if best != NONE:
            return best
        m, j = name_at(text, i, chars)
        if m != FULL:
            return m
        if fmt.id_tag and (m := match_literal(text, j, fmt.id_tag)) != NONE:
            if m == PREFIX:
                return PREFIX
            m, j = name_at(text, j + len(fmt.id_tag), chars)
            if m != FULL:
                return m
        if not ends:
            return FULL
        k = skip_ws(text, j)
        if k < 0:
            return NONE
        for e in ends:
            best = max(best, match_literal(text, k, e))
        return best

    return match_opener


def args_opener(text: str, i: int, chars: str, name_end: str, *, answer: str = "",
                code: str = "") -> Match:
    """The opener test of a call whose arguments must follow its name (Functionary's, where a
    name alone is no call): a name (word characters and `chars`; not `answer`), `name_end`,
    whitespace, then `{` (or, after the name `code`, anything: its code)."""
    m, j = name_at(text, i, chars)
    if m != FULL:
        return m
    m = match_literal(text, j, name_end)
    if m != FULL:
        return m
    word = text[i:j]
    if word == answer:
        return NONE
    k = skip_ws(text, j + len(name_end))
    if k < 0:
        return NONE
    if k == len(text):
        return PREFIX
    return FULL if text[k] == "{" or word == code else NONE


def write_call(fmt: CallFormat):
    """The writer of one call in `fmt` (registry.Writer's `call`): the call's own id where it
    is the name written as the record writes it (Kimi's `functions.NAME:IDX`), else the name
    with the record's prefix and the call's position."""

    def write(call, index: int) -> str:
        args = json.dumps(call.arguments, ensure_ascii=False)
        word = fmt.name_prefix + call.name + (f"{fmt.index}{index}" if fmt.index else "")
        cid = getattr(call, "id", None)
        if fmt.index and cid and cid != call.name and \
                name_of(fmt.name_prefix, fmt.index, cid) == call.name:
            word = cid
        return f"{fmt.call}{word}{fmt.name_end}{args}{fmt.call_end}"

    return write


def grammar_call(fmt: CallFormat):
    """A forced call in `fmt` as GBNF (registry.CallGrammar's `call`; `w`: engine/grammar's
    Writer, which bounds the schemas). An index is one or two digits."""

    def call(w, i: int, fn: dict) -> str:
        head = fmt.call + fmt.name_prefix + fn["name"]
        if fmt.index:
            rule = f"{w.seq(head + fmt.index)} [0-9] [0-9]? {w.seq(fmt.name_end)} {w.args(i, fn)}"
        else:
            rule = f"{w.seq(head + fmt.name_end)} {w.args(i, fn)}"
        return f"{rule} {w.seq(fmt.call_end)}" if fmt.call_end else rule

    return call


__all__ = ["NAME_CHARS", "NameJsonCall", "args_opener", "grammar_call", "name_json_reader",
           "name_of", "opener_test", "openers", "write_call"]
