"""Tencent Hunyuan 3 (Hy3): `<think:opensource>` reasoning and `<tool_calls:opensource>` sections
of key/value calls, every tag carrying the checkpoint's `:opensource` suffix.

Owns the family's record (`FORMAT`, a tagged shape: reader, writer and forced-call grammar
come from it, engine/parse/shapes/) and its one repair, a missing separator. Run by whichever
thread drives the parser.

    <think:opensource>The user wants the weather.</think:opensource>Checking.<tool_calls:opensource>
    <tool_call:opensource>get_weather<tool_sep:opensource>
    <arg_key:opensource>city</arg_key:opensource>
    <arg_value:opensource>Paris</arg_value:opensource>
    </tool_call:opensource>
    </tool_calls:opensource>

What the real template (tencent-Hy3.jinja) writes: `<｜hy_Assistant:opensource｜>` opens the
turn and `<｜hy_eos:opensource｜>` ends it; its switch is `reasoning_effort` (`no_think`, the
default, writes a closed `<think:opensource></think:opensource>` in the prompt; `low` and `high`
leave `<think:opensource>` open for the model); the history shows the reasoning in the same
block, the answer right after it, then one section holding each call as
`<tool_call:opensource>NAME<tool_sep:opensource>` and one `<arg_key:opensource>` /
`<arg_value:opensource>` pair per argument, each on a line of its own, a non-string value as
JSON. Values are typed by the tool's schema (engine/parse/schema.py): a string parameter keeps
its raw text (one leading and one trailing newline stripped), anything else is JSON, then a
Python literal, then the raw text. Several calls share one section: each
`<tool_call:opensource>` is read as its own call, and the section's end is consumed by the call
before it.

Choices where the other servers differ: the `:opensource` suffix is part of every marker (vLLM
reads the suffix from the tokenizer's `token_suffix`; stock vLLM and SGLang, without it, read
bare `<tool_call>`); a call whose `<tool_sep:opensource>` is missing (the name followed by the
first `<arg_key:opensource>` or by `</tool_call:opensource>`, which pruned checkpoints write)
is read and counted as `repaired_call` (vLLM requires the separator); a
`<tool_call:opensource>` outside a section is a call too (vLLM needs `<tool_calls:opensource>`
first), unless quoted; a complete call is accepted without `</tool_calls:opensource>`; a call
in the reasoning ends it only when it is a real call at a line start; values keep their spaces.
"""

from __future__ import annotations

from engine.parse.families.common import FULL, NONE, PREFIX, WS, Match, match_literal
from engine.parse.families.framed import word_then
from engine.parse.families.registry import register
from engine.parse.shapes.build import shape_family
from engine.parse.shapes.record import TAGGED, CallFormat
from engine.parse.shapes.tagged import NAME_CHARS

NAME = "hunyuan3"
SUFFIX = ":opensource"


def _tags(tag: str) -> tuple[str, str]:
    """The opening and closing tag `tag`, with the checkpoint's suffix."""
    return f"<{tag}{SUFFIX}>", f"</{tag}{SUFFIX}>"


THINK_OPEN, THINK_CLOSE = _tags("think")
SECTION, SECTION_END = _tags("tool_calls")
CALL, CALL_END = _tags("tool_call")
SEP = _tags("tool_sep")[0]
KEY, KEY_END = _tags("arg_key")
VALUE, VALUE_END = _tags("arg_value")
EOS = f"<｜hy_eos{SUFFIX}｜>"
_NO_SEP = "missing <tool_sep>"  # the repair, as `repaired_call` names it

FORMAT = CallFormat(TAGGED, section=SECTION + "\n", section_end=SECTION_END, call=CALL,
                    name_end=SEP + "\n", param=KEY, key_end=KEY_END + "\n", value=VALUE,
                    value_end=VALUE_END + "\n", call_end=CALL_END + "\n")
PRESERVED_TOKENS = (THINK_OPEN, THINK_CLOSE, SECTION, SECTION_END, CALL, CALL_END, SEP, KEY,
                    KEY_END, VALUE, VALUE_END)


def _match_opener(text: str, i: int) -> Match:
    """After the section: a call; after a call's opener: a name, then (after whitespace)
    `<tool_sep:opensource>`, or the first key or the call's end when the separator is
    missing."""
    m = match_literal(text, i, CALL)
    if m != NONE:
        return m
    return word_then(text, i, NAME_CHARS, (SEP, KEY, CALL_END), gap=True)


def _repairing(base: type) -> type:
    """The record's reader, taking a call whose separator is missing (a repair)."""

    class CallParser(base):
        def _name_end(self) -> bool:
            """After the name: whitespace, then `<tool_sep:opensource>` (consumed); without
            it, the first key or the call's end (left for the parameters' state, a repair)."""
            b = self._buf
            j = len(b) - len(b.lstrip(WS))
            if j:
                self._eat(j)
                b = self._buf
            if not b:
                return False
            m = self._lit(SEP)
            if m == FULL:
                return True
            undecided = m == PREFIX
            for lit in (KEY, CALL_END):
                mm = match_literal(b, 0, lit)
                if mm == FULL:
                    self.repaired(_NO_SEP)
                    return True
                undecided = undecided or mm == PREFIX
            if not undecided:
                self._fail("expected " + SEP)
            return False

    return CallParser


FAMILY = register(shape_family(
    FORMAT, name=NAME, models="Tencent Hunyuan 3 (Hy3)", reasoning=(THINK_OPEN, THINK_CLOSE),
    writer={"reasoning_open": THINK_OPEN, "reasoning_close": THINK_CLOSE, "before_calls": ""},
    reader=_repairing, match_opener=_match_opener,
    detect=(SEP, "':opensource'"), stops=(EOS,), preserved_tokens=PRESERVED_TOKENS,
    thinking=False, pack=NAME,
))
MARKERS, CallParser, match_opener = FAMILY.markers, FAMILY.call_parser, FAMILY.match_opener
