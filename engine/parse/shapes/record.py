"""A call syntax as data: `CallFormat`, one frozen record of markers, a shape and a few options.

Owns `CallFormat` and the shape names (`SHAPES`). A record says what a model writes for a list
of calls, literally: the writer writes exactly its strings around the names, keys and values,
and the reader reads them back with the whitespace between tags optional. Each shape engine of
this package (engine/parse/shapes/) turns one record into the three things a family needs: the
streaming reader, the writer and the forced-call grammar (docs/design.md, section 8). A record
holds only strings, booleans and names, so a probe that diffs a template's renders can fill one
in as well as a family module. Constants; any thread may read them.

The layout each shape writes (NAME, KEY, VALUE, ARGS: the call's; `[…]` repeated):

- `tagged`: `section` [`call` NAME `name_end` [`param` KEY `key_end` `value` VALUE
  `value_end`]… `call_end`] joined by `sep`, `section_end`. A string VALUE is raw text, any
  other JSON (or DSML's `string="true|false"` says which: `string_attr`).
- `json-object`: `section` [`call` {`name_key`: NAME, `args_key`: ARGS} `call_end`]… joined by
  `sep`, `section_end`.
- `json-list`: `section` `[`{`name_key`: NAME, `args_key`: ARGS}, …`]` `section_end` (with
  `keyed`, each object `{NAME: ARGS}`).
- `python-list`: `section` `[`NAME(KEY=VALUE, …), …`]` `section_end`, values Python literals.
- `name-json`: `section` [`call` `name_prefix` NAME `index`N `name_end` ARGS `call_end`]… joined
  by `sep`, `section_end`: the name in markers, the arguments one JSON object (DeepSeek, Kimi
  K2, Mistral's `NAME[ARGS]{…}`, Functionary).

An empty `section` with `line_start` means the list itself opens the calls (a bare `[` or `{`
at the start of a line, the whole reply or after text).
"""

from __future__ import annotations

from dataclasses import dataclass

TAGGED = "tagged"
JSON_OBJECT = "json-object"
JSON_LIST = "json-list"
PYTHON_LIST = "python-list"
NAME_JSON = "name-json"
SHAPES = (TAGGED, JSON_OBJECT, JSON_LIST, PYTHON_LIST, NAME_JSON)


@dataclass(frozen=True, slots=True)
class CallFormat:
    """One call syntax (see the module docstring for how each shape lays its fields out).

    shape: one of SHAPES.
    section / section_end: what opens and closes a list of calls ("" where each call stands
        alone: GLM's, Hermes').
    call / call_end: what opens and closes one call (`<invoke name="`, `<tool_call>`).
    sep: what the writer puts between two calls of one list.
    name_end: what ends a tagged call's name (`">`, a newline: the name then ends at
        whitespace).
    param / key_end / value / value_end: a tagged parameter's tags around its key and value
        (`key_end` quoted as an attribute, `"…`, lets other attributes come before its `>`).
    string_attr: a tagged key's tag says whether its value is a raw string
        (` string="true|false"`, written just before `key_end`'s last character).
    json_body: a tagged call's body may be a JSON arguments object instead of parameters.
    self_closing: a tagged call without parameters may end with its name's tag (`"/>`).
    name_key / args_key: a JSON call's keys; either order is read, `args_alt` too.
    name_alt: other keys a json-list reader takes for the name (Cohere's `name` beside
        `tool_name`): read, never written.
    args_alt: other keys a reader takes for the arguments (`parameters`).
    id_key: a json-list call object's key for the model's own id (Cohere's `tool_call_id`):
        read and kept as the call's id when it comes before the name, never written.
    keyed: a json-list call object is `{NAME: ARGS}`, its one key the call's name (Apertus').
    line_start: the call opener counts only at the start of a line (a bare `[` or `{`).
    single: a json-list's lone call object, without the brackets, is a list of one.
    repair_close: a json-list whose `]` never comes (its closer or text right after the last
        object) is still read, a `repaired_call` (`no ]`).
    name_prefix: a name-json call's text before its name, written and optional on read (Kimi's
        `functions.`).
    index: what stands before a name-json call's index after its name (Kimi's `:` of
        `NAME:0`): written with the call's position in its list, read as any digits.
    id_tag: a name-json call's id may follow its name after this tag (Mistral's
        `[CALL_ID]a1b2c3d4e`): read and kept as the call's id, never written.
    typed: a name-json call may write its type and `name_end` before its name (DeepSeek R1's
        `function<｜tool▁sep｜>NAME`): read, never written.
    fence: a name-json call's arguments may stand in a code fence (R1's ```json … ```): read,
        never written.
    also: other spellings of the same format the reader accepts, never written (DeepSeek V4's
        `tool_calls` section, V4.1's spaced tags).
    """

    shape: str
    section: str = ""
    section_end: str = ""
    call: str = ""
    call_end: str = ""
    sep: str = ""
    name_end: str = ""
    param: str = ""
    key_end: str = ""
    value: str = ""
    value_end: str = ""
    string_attr: bool = False
    json_body: bool = False
    self_closing: bool = False
    name_key: str = "name"
    name_alt: tuple[str, ...] = ()
    args_key: str = "arguments"
    args_alt: tuple[str, ...] = ("parameters",)
    id_key: str = ""
    keyed: bool = False
    line_start: bool = False
    single: bool = False
    repair_close: bool = False
    name_prefix: str = ""
    index: str = ""
    id_tag: str = ""
    typed: bool = False
    fence: bool = False
    also: tuple[CallFormat, ...] = ()

    def __post_init__(self) -> None:
        if self.shape not in SHAPES:
            raise ValueError(f"shape must be one of {', '.join(SHAPES)}, not {self.shape!r}")

    @property
    def spellings(self) -> tuple[CallFormat, ...]:
        """This record, then the other spellings its reader accepts."""
        return (self, *self.also)

    def spelled(self, field: str, empty: bool = False) -> tuple[str, ...]:
        """A field's stripped spellings over the record and its `also`, the record's first;
        with `empty`, an empty spelling too (a name that may end at nothing)."""
        return tuple(dict.fromkeys(s for f in self.spellings
                                   if (s := getattr(f, field).strip()) or empty))

    def tag_openers(self) -> tuple[str, ...]:
        """The call openers the parser scans for, for shapes that open on tags: each
        spelling's section, then its call."""
        return tuple(dict.fromkeys((*self.spelled("section"), *self.spelled("call"))))

    def opener(self) -> str:
        """The call opener the parser scans for: the section's, else the call's (stripped)."""
        return (self.section or self.call).strip()

    def describe(self) -> str:
        """A short human line: `tagged in <minimax:tool_call>`, `python list (bare)`."""
        where = self.opener()
        return f"{self.shape.replace('-', ' ')} " + (f"in {where}" if where else "(bare)")
