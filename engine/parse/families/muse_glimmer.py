"""Muse Glimmer: messages addressed by recipient (`to=self` the reasoning, `to=user` the answer,
`to=NAME` a call), calls written as ATEM `<atem:function_calls>` blocks.

Owns the family's markers, the reader of one call, its writer and its forced-call grammar. Run
by whichever thread drives the parser.

muse-glimmer.jinja ends the prompt with `<|start|>assistant`; the model names the recipient of
each message it writes, `<|eom|>` ends a message and `<|start|>assistant` begins the next, and
`<|eot|>` ends the turn. A reply that thinks, then calls (without the line breaks):

     to=self<|message|>I should look it up.<|eom|><|start|>assistant to=get_weather<|message|>
    <atem:function_calls>
    <atem:invoke name="get_weather">
    <atem:parameter name="city">Paris</atem:parameter>
    <atem:parameter name="days">2</atem:parameter>
    </atem:invoke>
    </atem:function_calls><|eot|>

and one that answers: ` to=user<|message|>It is sunny.<|eot|>`. Each call is a message of its
own (the template writes `<|eom|><|start|>assistant` between two). A parameter's value is its
text exactly ("spaces for string values are not stripped"), typed by the tool's schema
(engine/parse/schema.py): strings and numbers as they are, booleans `true`/`false`, None
`null`, lists and objects JSON. The leading space of the first recipient continues the prompt:
it goes with the tag it opens (`Markers.lead_ws`). `<|eom|>` in the answer ends a message
(markup); so does everything of the message frame (`<|start|>assistant`, ` to=user<|message|>`).

Detected by `<atem:function_calls>` (or `to=self<|message|>`), which no Harmony template has:
gpt-oss's `<|channel|>` is not in this one, so neither family takes the other's templates.

Choices where the other servers differ: a call's name is its invoke's, not the recipient's
(vLLM reads only the block; the recipient is not checked against it); an `<atem:function_calls>`
block (or an `<atem:invoke name="`) without a recipient message around it is a call too, as in
vLLM, unless quoted; several invokes in one block are several calls; a name written twice over
(`get_weather.get_weather`, the tool's namespace and itself) is the declared tool's, counted as
a repair (as SGLang's detector normalises it); values are typed by the schema, and without one
as JSON, then the raw text (vLLM types an unknown one as a string); the recipient's own text
and header (`<|message|>`) are the call's markup; `&quot;` / `&amp;` in an invoke's or a
parameter's name are read back (vLLM's grammar escapes them; the template writes names as they
are, and so does the writer). `<|eom|>` in the answer is a message end, never a stray closer
(every message ends with it); a `<|start|>assistant` in the reasoning ends it (a new message
begins: no anomaly), while a bare `to=NAME<|message|>` call there counts only at a line start
(an implicit end of reasoning).
"""

from __future__ import annotations

from engine.parse.families.common import (
    FULL,
    NONE,
    PREFIX,
    Match,
    match_literal,
    skip_ws,
    text_or_json,
)
from engine.parse.families.framed import AT_PARAM, ParamBody, name_at
from engine.parse.families.registry import CallGrammar, Family, Writer, register
from engine.parse.markers import Markers

NAME = "muse-glimmer"
START = "<|start|>"
MESSAGE = "<|message|>"
EOM, EOT, END_OF_TEXT = "<|eom|>", "<|eot|>", "<|end_of_text|>"
HEADER = START + "assistant"
TO = "to="
SELF = TO + "self" + MESSAGE
USER = TO + "user" + MESSAGE
CALLS = "<atem:function_calls>"
CALLS_END = "</atem:function_calls>"
INVOKE = '<atem:invoke name="'
INVOKE_END = "</atem:invoke>"
PARAM = '<atem:parameter name="'
PARAM_END = "</atem:parameter>"
NAME_CHARS = "_-.:"
NEXT = EOM + HEADER  # a message ends, the next begins

MARKERS = Markers(
    think_open=SELF,
    think_close=EOM,
    calls=(TO, CALLS, INVOKE),
    # `<|start|>assistant ` with its space first: the recipient after it is a tag of its own.
    markup=(HEADER + " ", HEADER, USER, EOM, EOT, END_OF_TEXT),
    reopen=True,
    lead_ws=True,
)
PRESERVED_TOKENS = (START, MESSAGE, EOM, EOT, END_OF_TEXT, CALLS, CALLS_END, "<atem:invoke",
                    INVOKE_END, "<atem:parameter", PARAM_END)

_BEGIN, _HEADER, _NAME, _NAME_END, _PARAMS, _KEY, _VALUE, _AFTER = range(8)


def match_opener(text: str, i: int) -> Match:
    """After `to=`: a recipient, `<|message|>`, then (after whitespace) `<atem:function_calls>`;
    after the block's opener: `<atem:invoke name="`; after that opener: `NAME"`."""
    m = match_literal(text, i, INVOKE)
    if m != NONE:
        return m
    m, j = name_at(text, i, NAME_CHARS)
    if m != FULL:
        return m
    m = match_literal(text, j, '">')
    if m != NONE:  # an invoke's name
        return m
    m = match_literal(text, j, MESSAGE)
    if m != FULL:
        return m
    j = skip_ws(text, j + len(MESSAGE))
    if j < 0:
        return NONE
    return match_literal(text, j, CALLS)


class CallParser(ParamBody):
    """One invoke, read after `to=` (the recipient, its header and the block's opener first),
    after the block's opener, or after an invoke's opener."""

    def __init__(self, schemas: dict, stream: bool) -> None:
        super().__init__(schemas, stream)
        self._st = _BEGIN

    def _step(self, st: int, eof: bool) -> bool:
        if st == _BEGIN:
            m = self._opened(INVOKE)
            if m is None:
                return False
            if m == FULL:
                self._st = _NAME
                return True
            m = match_literal(self._buf, self._name_end(), '">')
            if m == PREFIX:
                return False
            if m == FULL:
                self._st = _NAME  # the body began at the invoke's name
                return True
            if self._word(NAME_CHARS) is None:  # the recipient
                return False
            if not self.error:
                self._st = _HEADER
        elif st == _HEADER:  # the recipient's header, the block's opener, the invoke's
            return self._go(self._expect_seq((MESSAGE, CALLS, INVOKE)), _NAME)
        elif st == _NAME:
            name = self._attr_text('"', "bad function name", "<>\n")
            if name is None:
                return False
            self._start(self._declared(name))
            self._st = _NAME_END
        elif st == _NAME_END:
            return self._go(self._expect(">"), _PARAMS)
        elif st == _PARAMS:
            found = self._param_or_close(PARAM, INVOKE_END)
            if not found:
                return False
            self._st = _KEY if found == AT_PARAM else _AFTER
        elif st == _KEY:
            return self._go(self._key_upto('">', "bad parameter name"), _VALUE)
        elif st == _VALUE:
            return self._go(self._value_upto(PARAM_END), _PARAMS)
        else:
            self._close(CALLS_END, eof)
            return False
        return True

    def _name_end(self) -> int:
        """Where a name at the start of the buffer ends (its length; the buffer's when it may
        go on)."""
        b = self._buf
        k = 0
        while k < len(b) and (b[k].isalnum() or b[k] in NAME_CHARS):
            k += 1
        return k

    def _declared(self, name: str) -> str:
        """The name, or the declared tool that `NS.NS` (its namespace, then itself) names."""
        schemas = self.schemas
        if schemas and name not in schemas:
            head, dot, tail = name.partition(".")
            if dot and head == tail and head in schemas:
                self.repaired("namespaced name")
                return head
        return name


__all__ = ["MARKERS", "NAME", "PRESERVED_TOKENS", "CallParser", "match_opener"]


# --- the writer ---------------------------------------------------------------------------------


def _write_call(call, index: int) -> str:
    params = "".join(f'{PARAM}{k}">{text_or_json(v)}{PARAM_END}\n'
                     for k, v in call.arguments.items())
    return (f" {TO}{call.name}{MESSAGE}{CALLS}\n{INVOKE}{call.name}\">\n{params}{INVOKE_END}\n"
            f"{CALLS_END}")


def _grammar_call(w, i: int, fn: dict) -> str:
    """A forced call as GBNF (`w`: engine/grammar/writer.py's Writer): the recipient message
    and its block, the declared parameters in order (a string raw, anything else JSON)."""
    name = fn["name"]
    params = w.tagged(i, fn, PARAM, lambda raw: '">', PARAM_END + "\n", PARAM_END)
    head = f' {TO}{name}{MESSAGE}{CALLS}\n{INVOKE}{name}">\n'
    return f"{w.seq(head)} {params} {w.seq(INVOKE_END + chr(10) + CALLS_END)}"


FAMILY = register(Family(
    name=NAME, models="Muse Glimmer", markers=MARKERS, match_opener=match_opener,
    call_parser=CallParser,
    writer=Writer(_write_call, reasoning_open=" " + SELF, reasoning_close=NEXT,
                  answer_open=" " + USER, before_calls=NEXT, calls_sep=NEXT),
    detect=(CALLS, SELF), stops=(EOT, END_OF_TEXT), never_stops=(EOM,),
    preserved_tokens=PRESERVED_TOKENS, thinking=True, pack="muse-glimmer",
    repairs_history=False,
    tag_forms=(r"</?atem:[a-z_]+[^<>\n]*>",),
    grammar=CallGrammar(_grammar_call, sep=NEXT),
))
