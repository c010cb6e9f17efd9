"""ByteDance Seed-OSS: `<seed:think>` reasoning and Qwen-XML bodies in `<seed:tool_call>` sections.

Owns the family's markers, the reader of one call (Qwen XML's reader, engine/parse/families/
qwen_xml.py, closed by Seed's own section end) and its record (`FORMAT`, the tagged shape: the
writer and forced-call grammar come from it). Run by whichever thread drives the parser.

    <seed:think>The user wants the weather.</seed:think>
    Checking.
    <seed:tool_call>
    <function=get_weather>
    <parameter=city>Paris</parameter>
    <parameter=days>2</parameter>
    </function>
    </seed:tool_call>

What the real template (ByteDance-Seed-OSS.jinja) writes: the turn opens with
`<seed:bos>assistant\\n`; the model opens its reasoning itself (`<seed:think>`, nothing opened
by the prompt unless `thinking_budget` is 0, when the prompt holds a closed block); the history
shows the reasoning as `<seed:think>R</seed:think>`, then the answer, then one section per call
with the values unpadded (`<parameter=K>V</parameter>`); `<seed:eos>` ends the turn. Inside the
reasoning the model reports its budget in `<seed:cot_budget_reflect>` tags, which stay reasoning
text (preserved tokens, so the engine renders them). The body is Qwen XML's, so everything
Qwen's reader accepts and repairs holds here: values typed by the tool's schema, one leading and
one trailing newline of a value stripped, a missing `</parameter>` before `</function>` (then
`</seed:tool_call>`) or before the next declared `<parameter=`, drifted closers, Python
literals, each counted as `repaired_call`. Detection: `<seed:tool_call>` or `<seed:think>`, tried
before Qwen XML's `<parameter=` (which Seed's template writes too).

Choices where the other servers differ: reasoning is `<seed:think>` ... `</seed:think>` only
(vLLM splits on the first `</seed:think>` whether or not the block was opened); a call inside
the reasoning ends it only when it is a real call at a line start (vLLM's tool parser reads
calls after `</seed:think>` only, llama.cpp's PEG grammar none in the reasoning); a bare
`<function=` without `<seed:tool_call>` is text (vLLM falls back to reading bare functions when
no section is there); several `<function=` in one section are several calls (as vLLM's
findall; llama.cpp takes one function per section); a complete call is accepted without
`</seed:tool_call>` at the end of output or before other text (llama.cpp requires the closer).
"""

from __future__ import annotations

from engine.parse.families import qwen_xml
from engine.parse.families.common import FULL, PREFIX, match_literal, skip_ws
from engine.parse.families.registry import CallGrammar, Family, Writer, register
from engine.parse.markers import Markers
from engine.parse.shapes import tagged
from engine.parse.shapes.record import TAGGED, CallFormat

NAME = "seed-oss"
THINK_OPEN = "<seed:think>"
THINK_CLOSE = "</seed:think>"
SECTION = "<seed:tool_call>"
SECTION_END = "</seed:tool_call>"
FUNC = qwen_xml.OPENER  # "<function="
PARAM = "<parameter="
PARAM_END = "</parameter>"
FUNC_END = "</function>"
BUDGET = "<seed:cot_budget_reflect>"
BUDGET_END = "</seed:cot_budget_reflect>"
EOS = "<seed:eos>"
_MISSING = "missing </parameter>"  # the repair's name, as Qwen's reader spells it
_AFTER = qwen_xml._AFTER  # the state of Qwen's reader after `</function>`

MARKERS = Markers(THINK_OPEN, THINK_CLOSE, (SECTION,))
PRESERVED_TOKENS = (THINK_OPEN, THINK_CLOSE, SECTION, SECTION_END, FUNC, FUNC_END, PARAM,
                    PARAM_END, BUDGET, BUDGET_END)


def match_opener(text: str, i: int):
    """After `<seed:tool_call>` and whitespace: `<function=`."""
    return match_literal(text, i, FUNC)


class CallParser(qwen_xml.CallParser):
    """Qwen XML's reader of one `<function=...>` body, ended by Seed's section: after
    `</function>` (and whitespace) it consumes `</seed:tool_call>`, or hands over to the next
    `<function=` of the same section (`follow`), or ends the call before anything else."""

    def __init__(self, schemas: dict, stream: bool) -> None:
        super().__init__(schemas, stream)
        self._more = False  # another function of the same section follows

    def _run(self, eof: bool) -> None:
        super()._run(eof)
        if self.error or self._st != _AFTER or not self.done:
            return
        # Qwen's reader ends the call at whatever follows `</function>` except its own
        # `</tool_call>` (whitespace eaten): decide Seed's section end here instead.
        self.done = False
        b = self._buf
        m = match_literal(b, 0, SECTION_END)
        if m == FULL:
            self._eat(len(SECTION_END))
            self.done, self.end = True, self._pos
            return
        f = match_literal(b, 0, FUNC)
        if PREFIX in (m, f) and not eof:
            return  # undecided: the buffer holds at most a closer's length
        self._more = f == FULL
        self.done, self.end = True, self._pos

    def _terminator(self, b: str, lt: int, eof: bool):
        end = super()._terminator(b, lt, eof)
        if end is None and b.startswith(FUNC_END, lt):
            # Qwen's reader repairs a missing `</parameter>` before `</function>` only when
            # `</tool_call>` follows; Seed's section closer is `</seed:tool_call>`.
            j = skip_ws(b, lt + len(FUNC_END), None)
            m = match_literal(b, j, SECTION_END)
            if m == FULL or (m == PREFIX and eof):
                return self._ends((FUNC_END, len(FUNC_END)), _MISSING)
            if m == PREFIX:
                return PREFIX
        return end

    def follow(self):
        """The reader of the next function in the same section, when one follows."""
        return CallParser(self.schemas, self.stream) if self._more else None


# The syntax as data: the writer and the forced-call grammar come from the tagged shape's
# engine (one section a call, as the template writes the history, values unpadded); the reader
# above is Qwen's, closed by Seed's section.
FORMAT = CallFormat(TAGGED, call=SECTION + "\n" + FUNC, name_end=">\n", param=PARAM,
                    key_end=">", value_end=PARAM_END + "\n",
                    call_end=FUNC_END + "\n" + SECTION_END, sep="\n")


FAMILY = register(Family(
    name=NAME, models="ByteDance Seed-OSS-36B", markers=MARKERS, match_opener=match_opener,
    call_parser=CallParser,
    writer=Writer(tagged.write_call(FORMAT), reasoning_open=THINK_OPEN,
                  reasoning_close=THINK_CLOSE + "\n"),
    detect=(SECTION, THINK_OPEN), supersedes=("qwen-xml",),
    stops=(EOS,), preserved_tokens=PRESERVED_TOKENS, thinking=True, pack=NAME,
    grammar=CallGrammar(tagged.grammar_call(FORMAT), sep=FORMAT.sep),
))
