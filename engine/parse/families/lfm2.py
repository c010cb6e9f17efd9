"""LFM2 and LFM2.5 (Liquid AI): `<think>` reasoning and Python-style calls between
`<|tool_call_start|>` and `<|tool_call_end|>`.

Owns the family's record: its calls are the python-list shape (engine/parse/shapes/
python_calls.py reads, writes and forces them) between its own tokens. Run by whichever thread
drives the parser.

    <think>The user wants the weather.</think>Checking.<|tool_call_start|>[get_weather(
    city="Paris", days=3), get_time(zone='CET')]<|tool_call_end|>

(one line, as the model writes it). The list holds calls in Python's syntax: a name (dotted
names such as `Calendar.create_event` too), then keyword arguments whose values are Python
literals (strings in either quote, numbers, `True` / `False` / `None`, lists, tuples, dicts),
JSON's `true` / `false` / `null` too (LFM2.5's template writes a dict argument with `tojson`).
Each value is parsed on its own with `ast.parse(..., mode="eval")` and read with
`ast.literal_eval` (never evaluated), after JSON's three words are turned into constants and
sets into lists (JSON has no set; source order is kept). The calls stream one by one (`follow`
hands the next one of the list to the parser), each argument as soon as its value is complete.
A list element may also be a JSON object `{"name": …, "arguments": …}` (what LFM2 writes when
its system prompt asks for JSON calls), read by the Hermes JSON scanner.

The three LFM templates (LFM2-8B-A1B, LFM2.5-8B-A1B, LFM2.5-Instruct) differ in what they show
the model (tool lists between `<|tool_list_start|>` tokens or plain `List of tools: [`; past
calls rendered or left in the content) but not in what the model writes: one family.

Choices where the other servers differ: a value is typed by its literal, except that a bare word
for a parameter whose schema allows a string but not what the word reads as (or that has no
schema, when the word is no literal) is kept as that text (`city=Paris`, `city=42`, `zip=02134`:
a repair, `repaired_call` "unquoted string"; SGLang drops such a call, llama.cpp's grammar never
writes one), and a zero-padded integer (`month=07`, which Python refuses) is the integer where
the schema takes a number or says nothing ("zero-padded integer", as vLLM and SGLang read it); a
raw line end or NUL inside a one-line string is read as its escape ("raw control character in a
string", as SGLang and vLLM escape them), and a backslash that starts no escape is kept (`"\\d"`
is `\\d`, as Python reads it, without its warning); positional arguments, `**kwargs`, a repeated
argument and values that are not literals (names where no string goes, expressions, bytes) make
that call malformed (its text comes back with `malformed_call`, the list's calls before it stay
calls), never a call with arguments missing; unescaped quotes nested in a string (`command='sed
-n '1,5p' f'`) are not guessed at (SGLang and vLLM try every closing quote; here the call is
malformed); a keyword that Python reserves (`from=1`) is an argument like any other (SGLang
renames it around `ast`); an empty list (`[]`) is text, no call; the answer may go on after
`<|tool_call_end|>` (llama.cpp's grammar ends the turn there), and a call list the model echoes
after it stays answer text (vLLM hides it); a list whose calls are complete is accepted at the
end of output without its closer, and a `<|tool_call_end|>` right after the last call without
the `]` is repaired ("no ]").
"""

from __future__ import annotations

from engine.parse.families.registry import register
from engine.parse.markers import THINK_CLOSE, THINK_OPEN
from engine.parse.shapes.build import THINK, shape_family
from engine.parse.shapes.pyliteral import literal
from engine.parse.shapes.python_calls import NO_CLOSE, RAW_NEWLINE, write_value
from engine.parse.shapes.record import PYTHON_LIST, CallFormat

NAME = "lfm2"
CALL_START = "<|tool_call_start|>"
CALL_END = "<|tool_call_end|>"
TOOL_LIST = "<|tool_list_start|>"

FORMAT = CallFormat(PYTHON_LIST, section=CALL_START, section_end=CALL_END, sep=", ")
PRESERVED_TOKENS = (THINK_OPEN, THINK_CLOSE, CALL_START, CALL_END)

FAMILY = register(shape_family(
    FORMAT, name=NAME, models="LFM2, LFM2.5 (Liquid AI)", reasoning=THINK,
    writer={"before_calls": ""},
    detect=(CALL_START, TOOL_LIST, "List of tools: ["), stops=("<|im_end|>",),
    preserved_tokens=PRESERVED_TOKENS, thinking=True, pack="lfm2",
))
MARKERS, CallParser, match_opener = FAMILY.markers, FAMILY.call_parser, FAMILY.match_opener

__all__ = ["FAMILY", "MARKERS", "NAME", "NO_CLOSE", "PRESERVED_TOKENS", "RAW_NEWLINE",
           "CallParser", "literal", "match_opener", "write_value"]
