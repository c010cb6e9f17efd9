"""Every family's writer, then its reader: what a family's `Writer` writes, its parser reads back.

One property, parametrized over every family in the registry: hypothesis draws a reply
(reasoning, an answer, calls, whether the prompt opened the reasoning), the family's writer
writes it, and `OutputParser` reads it whole, one character at a time and in random chunks,
stream_tools off and on (parser_harness.parse_all_ways, which also checks the chunking
invariants). The reasoning and the content must come back byte for byte, the calls exactly (name
and arguments, typed through the tools' JSON schemas), with no anomalies, and finish_reason
"tool_calls" when there are calls. Two literal examples show the format the writers produce.
"""

from __future__ import annotations

import string

import pytest
from hypothesis import event, given
from hypothesis import strategies as st

from engine.parse.events import ToolCall
from engine.parse.families import REGISTRY
from tests.engine.parse.parser_harness import anomalies, parse_all_ways

# --- what the replies are made of -------------------------------------------------------------

# Text that cannot form markup by accident: no `<`, `[`, `{`, `|`, backticks or `~` (tags,
# Mistral's `[TOOL_CALLS]`, Llama's line-start `{`, Markdown fences), but inner newlines and
# characters outside ASCII.
SAFE = string.ascii_letters + string.digits + " .,;:!?-" + "é思😀" + "\n"
# A text never starts or ends with whitespace: newlines right before or after a tag belong to
# the tag (the parser's rule 2), so a written "\nx" could not come back as "\nx".
texts = st.text(SAFE, min_size=1, max_size=40).map(str.strip).filter(bool)
identifiers = st.from_regex(r"[a-z][a-z0-9_]{0,11}", fullmatch=True)
names = st.lists(identifiers, min_size=1, max_size=3).map("_".join)  # like get_weather

# A string argument may be empty or begin or end with whitespace: inside a call the writer frames
# it so that the reader's one-newline strip (the XML-like families) gives it back whole.
scalars = st.one_of(
    st.text(SAFE, max_size=30), st.integers(-10**9, 10**9), st.booleans(), st.none())
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(identifiers, inner, max_size=3),
    max_leaves=6)
arguments = st.dictionaries(identifiers, values, max_size=4)

# bool before int: True is an int to isinstance.
_TYPES = ((bool, "boolean"), (int, "integer"), (str, "string"), (type(None), "null"),
          (list, "array"), (dict, "object"))


def schema_of(value) -> dict:
    """The JSON schema of `value`'s own type, so the key/value families type it back."""
    kind = next(name for t, name in _TYPES if isinstance(value, t))
    if kind == "object":
        return {"type": "object", "properties": {k: schema_of(v) for k, v in value.items()}}
    return {"type": kind}


def tool_of(name: str, args: dict) -> dict:
    return {"type": "function", "function": {"name": name, "parameters": schema_of(args)}}


# The shapes a reply can take: (reasoning, answer, how many calls).
SHAPES = {
    "reasoning, answer": (True, True, (0, 0)),
    "answer": (False, True, (0, 0)),
    "reasoning, calls": (True, False, (1, 3)),
    "answer, calls": (False, True, (1, 3)),
    "reasoning, answer, calls": (True, True, (1, 3)),
    "calls": (False, False, (1, 3)),
}


@st.composite
def replies(draw, has_reasoning: bool):
    """(reasoning or None, answer, calls, opened); a family without reasoning (Llama 3 JSON)
    always gets None."""
    shape = draw(st.sampled_from(sorted(SHAPES)))
    thinks, answers, (lo, hi) = SHAPES[shape]
    reasoning = draw(texts) if thinks and has_reasoning else None
    answer = draw(texts) if answers else ""
    # Distinct names: each call's tool declares the schema of that call's own arguments.
    named = draw(st.lists(st.tuples(names, arguments), min_size=lo, max_size=hi,
                          unique_by=lambda c: c[0]))
    calls = [ToolCall(f"call_{i}", n, a, i) for i, (n, a) in enumerate(named)]
    opened = reasoning is not None and draw(st.booleans())  # the prompt opened the reasoning
    event(f"{shape}{', several calls' if len(calls) > 1 else ''}"
          f"{', opened' if opened else ''}")
    return reasoning, answer, calls, opened


# --- the round trip ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(REGISTRY))
@given(data=st.data(), seed=st.integers(0, 2**16))
def test_what_a_family_writes_its_reader_reads(name, data, seed):
    fam = REGISTRY[name]
    reasoning, answer, calls, opened = data.draw(replies(fam.reasoning is not None))
    text = fam.writer.write(reasoning, answer, calls, opened)
    # opened: the prompt ended inside the reasoning (start "reasoning"); otherwise the reply
    # starts in content and the model opens its reasoning itself.
    res = parse_all_ways(text, seeds=(seed,), family=name,
                         start="reasoning" if opened else "content",
                         tools=[tool_of(c.name, c.arguments) for c in calls])
    assert res.reasoning == (reasoning or ""), text
    assert res.content == answer, text
    assert [(c.name, c.arguments) for c in res.tool_calls] == \
        [(c.name, c.arguments) for c in calls], text
    assert not anomalies(res), text
    assert res.finish_reason == ("tool_calls" if calls else "stop")


# --- the format, literally --------------------------------------------------------------------

CALL = ToolCall("call_0", "get_weather", {"city": "Paris", "days": 3}, 0)


def test_qwen_xml_writes_think_then_answer_then_call():
    text = REGISTRY["qwen-xml"].writer.write("r", "a", [CALL])
    assert text == (
        "<think>\nr\n</think>\n\n"
        "a\n"
        "<tool_call>\n<function=get_weather>\n"
        "<parameter=city>\nParis\n</parameter>\n"
        "<parameter=days>\n3\n</parameter>\n"
        "</function>\n</tool_call>")
    # The prompt opened the reasoning: the reply starts inside it.
    assert REGISTRY["qwen-xml"].writer.write("r", "a", opened=True) == "r\n</think>\n\na"


def test_harmony_writes_analysis_then_a_commentary_call_or_the_final_answer():
    writer = REGISTRY["harmony"].writer
    # Each part is a message of its own: `<|end|>` ends one, `<|start|>assistant` begins the next.
    assert writer.write("r", "", [CALL]) == (
        "<|channel|>analysis<|message|>r<|end|><|start|>assistant"
        "<|channel|>commentary to=functions.get_weather <|constrain|>json"
        '<|message|>{"city": "Paris", "days": 3}<|call|>')
    assert writer.write("r", "a") == (
        "<|channel|>analysis<|message|>r<|end|><|start|>assistant"
        "<|channel|>final<|message|>a")
