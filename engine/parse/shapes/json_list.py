"""The json-list shape: calls written as a JSON list of objects, one call per object; the reader
the Command R7B, Command R+, Apriel and `json-list` formats share, and the writer and forced-call
grammar of a list from one `CallFormat`. FireFunction's list and Mistral's older one are read by
it too.

Owns `Element`, the Hermes JSON scanner (engine/parse/families/hermes_json.py) reading one call
object whose keys its family names (the name's: `name`, Cohere's `tool_name`; the
arguments': `arguments`, Cohere's `parameters`; the model's own id: Cohere's `tool_call_id`,
Apriel's `id`), `CallList`, the reader of a list of them (`[`, objects and commas, `]`, then
the family's closer), `list_opener` and `object_opener`, the opener tests of such a list, and
`list_reader`, `opener_test`, `write_call`, `grammar_call`, `frame` (a record's): Granite,
Nemotron v2 and Apriel are records of it. Pure Python,
run by whichever thread drives the parser (the grammar on the service's thread).

The call object's keys are read in either order (`{"arguments": …, "name": …}` too, as Mistral
models sometimes write them): the arguments then stream whole once the name is known.

Each object of the list is its own call: `CallList.follow()` hands the next one to the parser
after a comma (as Mistral's older `[TOOL_CALLS][...]` list is read), and the last call consumes
the `]` and the family's closer (`<|END_ACTION|>`, ```` ``` ````, `</tool_calls>`). A closer that
never comes does not undo a complete call: the call ends where its list ended. The object is
read by the Hermes scanner, so a closer inside a string never ends a call, the arguments stream
as canonical `json.dumps` fragments when the name came before them, and `json.loads` of the raw
object decides the result. The family's key names are mapped onto the scanner's `name` and
`arguments` as each key closes, so streaming works for every spelling.

The model's own id is kept only when it comes before the name (as every template writes it):
the call's first event (its name) then already carries it, and the id is the same streamed or
not. An id already used by an earlier object of the same list is not kept (two calls of one
reply never share an id); Prism numbers that call instead.
"""

from __future__ import annotations

import json

from engine.parse.families import hermes_json
from engine.parse.families.common import FULL, NONE, PREFIX, Match, match_literal, skip_ws
from engine.parse.families.framed import FramedBody
from engine.parse.shapes.record import CallFormat

_ID = "\x00id"  # the scanner's key for the model's own id (no JSON key can be it: NUL)

_BEGIN, _ELEM, _AFTER, _END = range(4)
NO_CLOSE = "no ]"  # the repair of a list whose `]` never came (repaired_call's text)


def object_opener(text: str, i: int, keys: tuple[str, ...]) -> Match:
    """`{`, optional whitespace, then one of `keys` as a JSON string (no `keys`: any key, a
    keyed call object's name)."""
    if i >= len(text):
        return PREFIX
    if text[i] != "{":
        return NONE
    j = skip_ws(text, i + 1)
    if j < 0:
        return NONE
    if not keys:
        return match_literal(text, j, '"')
    best = NONE
    for key in keys:
        best = max(best, match_literal(text, j, json.dumps(key)))
    return best


def list_opener(text: str, i: int, keys: tuple[str, ...], single: bool = True) -> Match:
    """Does a list of call objects begin at text[i]: `[`, whitespace, then an object whose
    first key is one of `keys`? With `single`, an object alone (no list) counts too."""
    if i >= len(text):
        return PREFIX
    if text[i] == "[":
        j = skip_ws(text, i + 1)
        return NONE if j < 0 else object_opener(text, j, keys)
    return object_opener(text, i, keys) if single else NONE


class Element(hermes_json.CallParser):
    """One call object with the family's key names (class attributes, set by subclasses)."""

    names: tuple[str, ...] = ("name",)  # keys that hold the call's name, preferred first
    args: tuple[str, ...] = ("arguments",)  # keys that hold its arguments, preferred first
    ids: tuple[str, ...] = ()  # keys that hold the model's own id
    keyed: bool = False  # the object is `{NAME: ARGS}`: its one key is the call's name
    seen: frozenset[str] = frozenset()  # ids the earlier objects of the list kept

    def _string_char(self, ch: str) -> None:
        closing = ch == '"' and not self._esc
        super()._string_char(ch)
        if not closing or self._in_str or len(self._stack) != 1:
            return
        top = self._stack[-1]
        if self._string_is_key and self.keyed:
            # The first key is the name: it starts the call, and its value streams as the
            # arguments (a second key is no call, `_finish_object` says).
            if self.name is None and top.key:
                self.name = top.key
                top.key = "arguments"
                if self.stream:
                    self._started = True
                    self.out.append(("start", self.name, self._pos))
        elif self._string_is_key:
            # A key of the call object just closed: name it as the scanner knows it, so the
            # name starts the call and the arguments stream (hermes_json reads `name` and
            # `arguments`).
            if top.key in self.names:
                top.key = "name"
            elif top.key in self.args:
                top.key = "arguments"
            elif top.key in self.ids:
                top.key = _ID
        elif top.key == _ID and self.name is None and self.call_id is None:
            own = "".join(self._str)
            self.call_id = own if own and own not in self.seen else None

    def _finish_object(self) -> None:
        self.resume = self._pos  # any error found here concerns the whole object
        try:
            obj = json.loads("".join(self._raw), strict=False)
        except ValueError as e:
            self.error = f"bad JSON: {e}"
            return
        if not isinstance(obj, dict):
            self.error = "not an object"
            return
        if self.keyed:
            if len(obj) != 1:
                self.error = "not one call"
                return
            ((name, args),) = obj.items()
        else:
            name = next((obj[k] for k in self.names if k in obj), None)
            args = next((obj[k] for k in self.args if k in obj), {})
        if not isinstance(name, str) or not name:
            self.error = "no name"
            return
        if isinstance(args, str):
            try:
                args = json.loads(args, strict=False) if args.strip() else {}
            except ValueError:
                self.error = "arguments string is not JSON"
                return
        if args is None:
            args = {}
        if not isinstance(args, dict):
            self.error = "arguments is not an object"
            return
        self.name, self.arguments = name, args
        # Done at the closing brace (no look past it, unlike a Hermes body): what follows is
        # the list's, so the call's end never depends on how the text was chunked.
        self.done, self.end = True, self._pos
        if self.stream:
            if not self._started:
                self._started = True
                self.out.append(("start", name, self._pos))
            if not self._args_streamed:
                self.out.append(("args", json.dumps(args), self._pos))


class CallList(FramedBody):
    """A list of call objects read one call at a time (subclasses set the class attributes).

    element: the `Element` class of one object.
    single: an object alone, without `[ ]`, is a list of one.
    closers: what ends the list after `]` (or after the lone object), after whitespace:
        consumed with the last call; anything else ends the call before that whitespace.
    repair_close: a closer or text right after an object of the list (no `]`) ends the list,
        a repair (`no ]`); the closer is consumed.
    opened: the list's `[` was read before the body (FireFunction's opener holds it): the
        reader starts at the first object.
    """

    element: type[Element] = Element
    single: bool = True
    closers: tuple[str, ...] = ()
    repair_close: bool = False
    opened: bool = False

    def __init__(self, schemas: dict, stream: bool) -> None:
        super().__init__(schemas, stream)
        self._st = _ELEM if self.opened else _BEGIN
        self._listed = self.opened  # inside `[ ]`
        self._more = False  # a comma followed: the next object is the next call
        self._seen: frozenset[str] = frozenset()

    def follow(self) -> CallList | None:
        """The reader of the list's next object, when a comma followed this one."""
        if not self._more:
            return None
        nxt = type(self)(self.schemas, self.stream)
        nxt._st, nxt._listed = _ELEM, True
        nxt.closers = self.closers  # what the prelude decided (Command R+'s fence) holds on
        nxt._seen = self._seen | ({self.call_id} if self.call_id else set())
        return nxt

    def _prelude(self, eof: bool) -> bool:
        """What the family writes before the list (Command R+'s fence): True once it is read
        (or there is none); False while undecided, or after failing the body."""
        return True

    def _step(self, st: int, eof: bool) -> bool:
        if st == _BEGIN:
            if not self._prelude(eof):
                return False
            if not self._ws():
                return False
            if self._buf[0] == "[":
                self._eat(1)
                self._listed = True
            elif not self.single:
                self._fail("expected [")
                return False
            self._st = _ELEM
        elif st == _ELEM:
            if self._json is None:
                if not self._ws():
                    return False
                if self._buf[0] != "{":
                    self._fail("expected {")
                    return False
                self._json = self.element(self.schemas, self.stream)
                self._json.seen = self._seen
                self._json_at = self._pos
            whole = self._sub(eof)
            self.call_id = self._json.call_id  # set before the name: the first event has it
            if not whole:
                return False
            self._st = _AFTER if self._listed else _END
        elif st == _AFTER:  # after an object of the list: `,` (another follows) or `]`
            if self._close_at < 0:
                self._close_at = self._pos
            if not self._ws() and not eof:
                return False
            b = self._buf
            if b[:1] == ",":
                self._more = True
                self._eat(1)
                self.done, self.end = True, self._pos
                self._close_at = -1
            elif b[:1] == "]":
                self._eat(1)
                self._close_at = -1
                self._st = _END
            elif b and self.repair_close:
                self._unclosed(eof)
                return False
            else:  # the list just stops: the call is whole, what follows is text
                self.done, self.end = True, self._close_at
                self._close_at = -1
        else:
            if self.closers:
                self._close(self.closers, eof)
            else:
                self.done, self.end = True, self._pos
            return False
        return True

    def _unclosed(self, eof: bool) -> None:
        """After an object, neither `,` nor `]`: the list's closer (consumed) or text ends the
        list without its `]`, a repair; undecided while the text ends inside a closer."""
        best, hit = NONE, ""
        for c in self.closers:
            m = match_literal(self._buf, 0, c)
            if m == FULL:
                best, hit = FULL, c
                break
            best = max(best, m)
        if best == PREFIX and not eof:
            return
        self.repaired(NO_CLOSE)
        if hit:
            self._eat(len(hit))
            self.done, self.end = True, self._pos
        else:  # text after the last object: the call ends before the whitespace
            self.done, self.end = True, self._close_at
        self._close_at = -1



# --- from a record ------------------------------------------------------------------------------


def _keys(fmt: CallFormat) -> tuple[str, ...]:
    """The keys a call object may begin with: its id's, its name's, its arguments' (a keyed
    object's: any, its name)."""
    if fmt.keyed:
        return ()
    return (*((fmt.id_key,) if fmt.id_key else ()), fmt.name_key, *fmt.name_alt, fmt.args_key,
            *fmt.args_alt)


def list_reader(fmt: CallFormat) -> type[CallList]:
    """The reader of `fmt`'s list, one call at a time (a list is required, `[` first, unless
    the record is `single`)."""
    element = type("Element", (Element,), {
        "names": (fmt.name_key, *fmt.name_alt), "args": (fmt.args_key, *fmt.args_alt),
        "ids": (fmt.id_key,) if fmt.id_key else (), "keyed": fmt.keyed})
    closers = tuple(dict.fromkeys(s for f in fmt.spellings if (s := f.section_end.strip())))
    return type("CallParser", (CallList,), {"element": element, "single": fmt.single,
                                             "closers": closers,
                                             "repair_close": fmt.repair_close})


def openers(fmt: CallFormat) -> tuple[str, ...]:
    """The parser's call openers: the section's; for a bare list, its `[`."""
    return tuple(dict.fromkeys(s for f in fmt.spellings if (s := f.section.strip()))) or ("[",)


def opener_test(fmt: CallFormat):
    """`match_opener(text, i)`: after the section, the list; after a bare `[` (the body's
    own), a call object whose first key is one of the format's."""
    keys = _keys(fmt)
    if fmt.section:
        return lambda text, i: list_opener(text, i, keys, single=fmt.single)
    return lambda text, i: object_opener(text, i, keys)


def write_call(fmt: CallFormat):
    """The writer of one call object (the brackets are the list's frame, `frame`)."""

    def write(call, index: int) -> str:
        if fmt.keyed:
            return "{" + json.dumps(call.name) + ": " \
                + json.dumps(call.arguments, ensure_ascii=False) + "}"
        return json.dumps({fmt.name_key: call.name, fmt.args_key: call.arguments},
                          ensure_ascii=False)

    return write


def grammar_call(fmt: CallFormat):
    """One call object as GBNF (`w`: engine/grammar's Writer, which bounds the schemas)."""

    def call(w, i: int, fn: dict) -> str:
        name = json.dumps(fn["name"])
        if fmt.keyed:
            head = "{" + name + ": "
        else:
            head = "{" + json.dumps(fmt.name_key) + ": " + name + ", " \
                + json.dumps(fmt.args_key) + ": "
        return f"{w.seq(head)} {w.args(i, fn)} {w.seq('}')}"

    return call


def frame(fmt: CallFormat) -> tuple[str, str]:
    """(what opens, what closes) a list of calls."""
    return fmt.section + "[", "]" + fmt.section_end


__all__ = ["CallList", "Element", "frame", "grammar_call", "list_opener", "list_reader",
           "object_opener", "opener_test", "openers", "write_call"]
