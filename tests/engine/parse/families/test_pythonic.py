"""engine/parse/families/pythonic.py and pythonic_tagged.py (Python-call lists, bare and between
`<|python_start|>` tokens): every parser rule (tests/engine/parse/family_rules.py) and the
cases of other servers' pythonic parsers, each parsed at every chunking, stream_tools off and
on."""

from __future__ import annotations

import json

import pytest

from engine.parse.families import pythonic_tagged
from tests.engine.parse.family_rules import RULES, Family
from tests.engine.parse.parser_harness import anomalies, parse_all_ways


def _kwargs(args: dict) -> str:
    return ", ".join(f"{k}={json.dumps(v)}" for k, v in args.items())


def bare(name: str, args: dict) -> str:
    return f"[{name}({_kwargs(args)})]"


def tagged(name: str, args: dict) -> str:
    return f"{pythonic_tagged.PYTHON_START}{bare(name, args)}{pythonic_tagged.PYTHON_END}"


BARE = Family("pythonic", bare, "[get_weather(city=os.system('x'))]", think=None)
TAGGED = Family("pythonic-tagged", tagged,
                "<|python_start|>[get_weather('Paris')]<|python_end|>", think=None)


@pytest.mark.parametrize("fam", [BARE, TAGGED], ids=lambda f: f.family)
@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.__name__)
def test_rule(rule, fam):
    rule(fam)


def _calls(text: str, family: str = "pythonic", **kw):
    res = parse_all_ways(text, family=family, start="content", **kw)
    return [(c.name, c.arguments) for c in res.tool_calls], res


# Cases of vLLM's pythonic parser tests (tests/entrypoints/openai/tool_parsers/
# test_pythonic_tool_parser.py: simple, more types, parameterless, empty dict and list,
# escaped strings, parallel calls), each as the whole reply.
VLLM_PYTHONIC = [
    ("[get_weather(city='San Francisco', metric='celsius')]",
     [("get_weather", {"city": "San Francisco", "metric": "celsius"})]),
    ("[register_user(name='John Doe', age=37, address={'city': 'San Francisco', 'state': 'CA'},"
     " role=None, passed_test=True, aliases=['John', 'Johnny'])]",
     [("register_user", {"name": "John Doe", "age": 37,
                         "address": {"city": "San Francisco", "state": "CA"}, "role": None,
                         "passed_test": True, "aliases": ["John", "Johnny"]})]),
    ("[get_weather()]", [("get_weather", {})]),
    ("[do_something_cool(additional_data={})]", [("do_something_cool", {"additional_data": {}})]),
    ("[do_something_cool(steps=[])]", [("do_something_cool", {"steps": []})]),
    ("[get_weather(city='Martha\\'s Vineyard', metric='\\\"cool units\\\"')]",
     [("get_weather", {"city": "Martha's Vineyard", "metric": '"cool units"'})]),
    ("[get_weather(city='San Francisco', metric='celsius'), get_weather()]",
     [("get_weather", {"city": "San Francisco", "metric": "celsius"}), ("get_weather", {})]),
]


@pytest.mark.parametrize("text,want", VLLM_PYTHONIC, ids=range(len(VLLM_PYTHONIC)))
def test_vllm_pythonic_cases(text, want):
    got, res = _calls(text)
    assert got == want and res.content == "" and not anomalies(res)


def test_llama4_pythonic_between_its_tokens():
    """vLLM's llama4_pythonic parser tests (test_llama4_pythonic_tool_parser.py): the list
    between `<|python_start|>` and `<|python_end|>`, and text after it."""
    text = ("<|python_start|>[get_weather(city='LA', metric='C'), "
            "register_user(name='Doe', age=9)]<|python_end|>Done.")
    got, res = _calls(text, "pythonic-tagged")
    assert got == [("get_weather", {"city": "LA", "metric": "C"}),
                   ("register_user", {"name": "Doe", "age": 9})]
    assert res.content == "Done." and not anomalies(res)


def test_after_text_and_nested_literals():
    got, res = _calls('I will look.\n[search(q="x", opts={"deep": [1, {"a": None}]}, '
                      "fast=False)]\nThen answer.")
    assert got == [("search", {"q": "x", "opts": {"deep": [1, {"a": None}]}, "fast": False})]
    assert res.content == "I will look.Then answer."


def test_brackets_in_prose_stay_text():
    for text in ("[1] a footnote", "See [the docs] here.", "Mid-line [get_weather(city='x')]",
                 "[Note: done]"):
        got, res = _calls(text)
        assert got == [] and res.content == text and not anomalies(res), text
