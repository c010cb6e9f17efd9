"""MiniCPM5 (openbmb): `<think>` reasoning and XML calls `<function name="..."><param name="...">`.

Owns the family's markers, the streaming reader of one call, its writer and forced-call grammar.
Run by whichever thread drives the parser.

    <think>
    The user wants the weather.
    </think>

    Checking.
    <function name="get_weather"><param name="city">Paris</param></function>
    <function name="note"><param name="text"><![CDATA[two
    lines & a <tag>]]></param><param name="days">2</param></function>

What the real template (openbmb-MiniCPM5-1B.jinja) writes: ChatML turns ending with
`<|im_end|>`; `enable_thinking` true opens `<think>\\n` for the model, false writes a closed
empty block, unset writes neither (the model may open one itself); the history shows the
reasoning as `<think>\\nR\\n</think>\\n\\n`, then the answer, then each call on a line of its
own with no section around the calls, a value that holds `<`, `&` or a newline wrapped in a
CDATA block, any other value as its text. `<function`, `<param`, `</param>` and `</function>` are
special tokens of the vocabulary (llama.cpp's preserved tokens), so the call opener is
`<function` and the reader takes the rest of the tag, ` name="NAME">`, as the body's start.

Values: a CDATA section is taken verbatim (several sections and the text around them join, so
a value may hold `]]>` as `]]]]><![CDATA[>`); outside one, the text runs to the first
`</param>`, with one leading and one trailing newline stripped (as the other XML families'). The
text is then typed by the tool's schema (engine/parse/schema.py): a string parameter keeps it,
anything else is JSON, then a Python literal (the template writes non-strings with jinja's
`str`, so `True` and `{'k': 'v'}` are what the history shows; counted as `repaired_call`), then
the raw text. A repeated parameter keeps its first value. With `stream`, each parameter's
`json.dumps` fragment is written when its value closes.

Choices where the other servers differ: a tag written without its space (`<functionname="`,
`<paramname="`, which vLLM normalises silently) is read and counted as `repaired_call`;
text outside CDATA is not XML-unescaped (`&amp;` stays as written, as in llama.cpp; vLLM's
XML parse decodes it); values keep their spaces (vLLM strips them); a parameter the tool does not
declare is kept, a call to an undeclared tool or without its required parameters is still a
call (counted `unknown_tool` for the former; vLLM drops the parameter and returns such calls as
text, and maps a few alias tool names, which Prism does not); a duplicate parameter keeps its
first value (vLLM refuses the call); text may follow a call (llama.cpp's grammar ends the reply
at the calls); `<function` in the reasoning is a call only at a line start, and ends the
reasoning (vLLM reads calls after the last `</think>` only).
"""

from __future__ import annotations

from engine.parse.families.common import FULL, NONE, PREFIX, Match, match_literal, text_or_json
from engine.parse.families.framed import AT_PARAM, MAX_NAME, ParamBody
from engine.parse.families.registry import CallGrammar, Family, register, think_writer
from engine.parse.markers import THINK_CLOSE, THINK_OPEN, Markers

NAME = "minicpm5"
FUNC = "<function"
FUNC_END = "</function>"
PARAM = "<param"
PARAM_END = "</param>"
NAME_ATTR = 'name="'
CDATA = "<![CDATA["
CDATA_END = "]]>"
IM_END = "<|im_end|>"
_BAD_NAME = '"<>\n'  # what a function or parameter name cannot hold
_COLLAPSED = "no space in the tag"  # `<functionname="`: the repair, as `repaired_call` names it

_BEGIN, _NAME, _PARAMS, _PGAP, _KEY, _VALUE = range(6)

MARKERS = Markers(THINK_OPEN, THINK_CLOSE, (FUNC,))
PRESERVED_TOKENS = (THINK_OPEN, THINK_CLOSE, FUNC, FUNC_END, PARAM, PARAM_END)


def match_opener(text: str, i: int) -> Match:
    """After `<function` and whitespace: `name="NAME">` (NAME without quotes, brackets or
    newlines, at most MAX_NAME characters)."""
    m = match_literal(text, i, NAME_ATTR)
    if m != FULL:
        return m
    j = k = i + len(NAME_ATTR)
    n = len(text)
    while k < n and text[k] not in _BAD_NAME:
        k += 1
        if k - j > MAX_NAME:
            return NONE
    if k == n:
        return PREFIX
    if k == j or text[k] != '"':
        return NONE
    return match_literal(text, k, '">')


class CallParser(ParamBody):
    """One call's body: ` name="NAME">`, then `<param name="K">V</param>`... `</function>`."""

    def __init__(self, schemas: dict, stream: bool) -> None:
        super().__init__(schemas, stream)
        self._st = _BEGIN
        self._gap = False  # whitespace came between `<function`/`<param` and `name="`
        self._cdata = False  # inside a CDATA section of the value
        self._seg: list[str] = []  # the current segment's text (raw or CDATA)
        self._segs: list[tuple[bool, str]] = []  # (is CDATA, text) of the value so far

    def _step(self, st: int, eof: bool) -> bool:
        if st in (_BEGIN, _PGAP):  # whitespace, then `name="`
            before = self._pos
            more = self._ws()
            self._gap = self._gap or self._pos > before
            if not more:
                return False
            if not self._expect(NAME_ATTR):
                return False
            if not self._gap:
                self.repaired(_COLLAPSED)
            self._st = _NAME if st == _BEGIN else _KEY
        elif st in (_NAME, _KEY):
            word = self._name()
            if not word:
                return False
            if st == _NAME:
                self._start(word)
                self._st = _PARAMS
            else:
                self._key = word
                self._segs, self._seg, self._cdata = [], [], False
                self._st = _VALUE
        elif st == _PARAMS:
            found = self._param_or_close(PARAM, FUNC_END)
            if found == AT_PARAM:
                self._gap = False
                self._st = _PGAP
            elif found:  # the call's end
                self.done, self.end = True, self._pos
            return bool(found)
        elif not self._value_text():  # _VALUE
            return False
        return True

    def _name(self) -> str | None:
        """A name up to its closing `">` (both consumed): None while it may go on, "" with the
        body failed when it is not one."""
        b = self._buf
        k = 0
        n = len(b)
        while k < n and b[k] not in _BAD_NAME:
            k += 1
            if k > MAX_NAME:
                self._fail("bad name")
                return ""
        if k + 1 >= n:
            return None if k == n or b[k] == '"' else self._bad()
        if not k or b[k : k + 2] != '">':
            return self._bad()
        word = b[:k]
        self._eat(k + 2)
        return word

    def _bad(self) -> str:
        self._fail("bad name")
        return ""

    def _value_text(self) -> bool:
        """Read the value up to `</param>`, CDATA sections verbatim; True once it closed. All
        but what could begin a closer leaves the buffer as it comes (linear cost)."""
        while True:
            b = self._buf
            if self._cdata:
                k = b.find(CDATA_END)
                if k < 0:
                    self._keep(len(CDATA_END))
                    return False
                self._close_seg(True, k, CDATA_END)
                continue
            k = b.find(PARAM_END)
            c = b.find(CDATA, 0, k if k >= 0 else len(b))
            if c >= 0:
                self._close_seg(False, c, CDATA)
                self._cdata = True
                continue
            if k < 0:
                self._keep(len(CDATA))
                return False
            self._close_seg(False, k, PARAM_END)
            self._join_value()
            self._st = _PARAMS
            return True

    def _keep(self, size: int) -> None:
        """Move all but the last `size - 1` characters (a closer may begin there) into the
        current segment."""
        safe = len(self._buf) - size + 1
        if safe > 0:
            self._seg.append(self._buf[:safe])
            self._eat(safe)

    def _close_seg(self, cdata: bool, k: int, marker: str) -> None:
        """The segment (CDATA or not) ends at `_buf[k]`, where `marker` stands: both consumed."""
        self._seg.append(self._buf[:k])
        self._eat(k + len(marker))
        self._segs.append((cdata, "".join(self._seg)))
        self._seg = []
        self._cdata = False

    def _join_value(self) -> None:
        """The value's segments joined, one newline stripped at each end outside CDATA."""
        segs = self._segs
        texts = [t for _, t in segs]
        if not segs[0][0] and texts[0].startswith("\n"):
            texts[0] = texts[0][1:]
        if not segs[-1][0] and texts[-1].endswith("\n"):
            texts[-1] = texts[-1][:-1]
        self._value("".join(texts))


def _write_text(text: str) -> str:
    """A value's text as the template writes it: in a CDATA block when it holds `<`, `&` or a
    newline (`]]>` split across two blocks), else as it is."""
    if not any(c in text for c in "<&\n"):
        return text
    return CDATA + text.replace(CDATA_END, "]]" + CDATA_END + CDATA + ">") + CDATA_END


def _write_call(call, index: int) -> str:
    params = "".join(
        f'{PARAM} {NAME_ATTR}{k}">'
        f"{_write_text(text_or_json(v))}"
        f"{PARAM_END}"
        for k, v in call.arguments.items())
    return f'{FUNC} {NAME_ATTR}{call.name}">{params}{FUNC_END}'


def _grammar_call(w, i: int, fn: dict) -> str:
    """A forced call as GBNF (`w`: engine/grammar/writer.py's Writer): the declared properties
    in order, the required ones always; a string as text without `<` or as one CDATA block,
    anything else as JSON for its schema."""
    cdata = f"{w.seq(CDATA)} {w.until(CDATA_END)} {w.seq(CDATA_END)}"
    items, required = w.props(fn)
    if not items:
        key = f"{w.prefix}{i}-key"
        w.rules[key] = '[^"<>\\n]+'
        one = (f'{w.seq(PARAM + " " + NAME_ATTR)} {key} {w.seq(chr(34) + ">")} '
               f"({w.until('<')} | {cdata}) {w.seq(PARAM_END)}")
        params = f"({one})*"
    else:
        parts = []
        for j, (k, schema) in enumerate(items):
            enum = schema.get("enum")
            if isinstance(enum, list) and enum and all(isinstance(e, str) for e in enum):
                value = w.raw(schema, "<")  # one of the enum's strings
            elif not enum and schema.get("type", "string") == "string":
                value = f"({w.until('<')} | {cdata})"
            else:
                value = w.json(schema, f"{w.prefix}{i}-p{j}", {})
            tag = w.seq(f'{PARAM} {NAME_ATTR}{k}">')
            one = f"{tag} {value} {w.seq(PARAM_END)}"
            parts.append(f"({one})" + ("" if k in required else "?"))
        params = " ".join(parts)
    head = f'{FUNC} {NAME_ATTR}{fn["name"]}">'
    return f"{w.seq(head)} {params} {w.seq(FUNC_END)}"


FAMILY = register(Family(
    name=NAME, models="MiniCPM5 (openbmb)", markers=MARKERS, match_opener=match_opener,
    call_parser=CallParser, writer=think_writer(_write_call),
    detect=('<param name="',),
    stops=(IM_END,), preserved_tokens=PRESERVED_TOKENS, thinking=True, pack=NAME,
    grammar=CallGrammar(_grammar_call, sep="\n"),
    tag_forms=(r"</?(?:function|param)\b[^<>\n]*>",),
))
