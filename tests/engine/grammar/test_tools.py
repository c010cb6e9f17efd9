"""engine/grammar/: the forced-call grammar of every family, proved by its parser.

The model tests sample SmolLM2 (the default model) under each family's grammar and read the
output with that family's own parser (engine/parse/parser.py): the parser must read the call(s) to
the chosen tool, with arguments valid for the tool's schema, and nothing else.

SmolLM2's vocabulary has none of the families' special tokens (`<|channel|>`, `[TOOL_CALLS]`,
`<｜tool▁sep｜>`, ...), so `special_ids` finds none and its tokenizer writes the markers as plain
text pieces: on this model the grammars are sampled with their markers as text, which is still
the right test of each family's shape. The token-reference path (a marker that IS a special
token of the vocabulary becomes `<[ID]>`) is tested on a special token SmolLM2 does have,
`<filename>`, by sampling under a grammar that references it.

The small model runs on in a loop when "required" lets it write several calls; those runs
end at max_tokens with the last call cut off, which the parser leaves as text.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import jsonschema
import pytest

from engine.backends.base import Job
from engine.chat.detect import preserved_tokens
from engine.chat.request import Sampling
from engine.grammar import tools as tool_grammar
from engine.grammar.tools import FORMATS, forced_call, special_ids
from engine.parse.events import result_of
from engine.parse.families import markers
from engine.parse.parser import OutputParser

FAMILIES = sorted(d for d in FORMATS if d != "auto")
# Enumerated strings keep SmolLM2's values short (a free raw value, it rambles to max_tokens);
# `days` is an integer, written as JSON even by the key/value families.
WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object",
    "properties": {"city": {"type": "string", "enum": ["Paris", "London"]},
                   "days": {"type": "integer"}},
    "required": ["city"]}}}
SEARCH = {"type": "function", "function": {"name": "search", "parameters": {
    "type": "object", "properties": {"query": {"type": "string", "enum": ["weather", "news"]}},
    "required": ["query"]}}}
TOOLS = (WEATHER, SEARCH)
SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
# SmolLM2 spells DeepSeek's fullwidth bars byte by byte: its calls take more tokens.
BUDGET = {"dsml": 3, "deepseek": 2}
BUDGET["hunyuan3"] = 3  # its `:opensource` tags, spelled piece by piece
BUDGET["kimi-k3"] = 3  # `<|open|>`, `<|sep|>`, `<|close|>` around every tag, spelled piece by piece
BUDGET["muse-glimmer"] = 2  # its recipient header and `<atem:…>` tags
PROMPT = ("<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n"
          "What is the weather in Paris? Answer with a tool call.<|im_end|>\n"
          "<|im_start|>assistant\n")


def sample(engine, grammar: str, max_tokens: int = 160, prompt: str = PROMPT):
    tokens, fin, done = [], [], threading.Event()
    job = Job(prompt=prompt, max_tokens=max_tokens, grammar=grammar,
              sampling=Sampling(temperature=0.0), on_token=tokens.append,
              on_finish=lambda f: (fin.append(f), done.set()))
    engine.submit(job)
    assert done.wait(300), "the job did not finish"
    return tokens, fin[0]


def read(family: str, text: str):
    p = OutputParser(start="content", family=family, tools=list(TOOLS))
    return result_of(p.feed(text) + p.finish())


def check_call(call, names) -> None:
    import json

    assert call.name in names
    args = call.arguments if isinstance(call.arguments, dict) else json.loads(call.arguments)
    jsonschema.validate(args, SCHEMAS[call.name])


def grammar_check(engine, grammar: str) -> None:
    """llama.cpp parses the grammar against the model's vocabulary (token ids included)."""
    import llama_cpp as C

    vocab = engine._vocab._model.vocab  # the engine's own vocab-only model
    g = C.llama_sampler_init_grammar(vocab, grammar.encode(), b"root")
    assert g, grammar[:400]
    C.llama_sampler_free(g)


def accepts(engine, grammar: str, text: str) -> bool:
    """Does llama.cpp's grammar sampler take `text` whole and then allow the end? The text's
    tokens are offered one at a time: each must keep its logit under the grammar before it is
    accepted (accepting a refused token would abort in llama.cpp)."""
    import ctypes
    import math

    import llama_cpp as C

    vocab = engine._vocab._model.vocab
    smpl = C.llama_sampler_init_grammar(vocab, grammar.encode(), b"root")
    assert smpl
    try:
        eos = int(C.llama_vocab_eos(vocab))
        for tok in [*engine.tokenize(text), eos]:
            cell = (C.llama_token_data * 1)()
            cell[0].id, cell[0].logit, cell[0].p = tok, 0.0, 0.0
            arr = C.llama_token_data_array(data=cell, size=1, selected=-1, sorted=False)
            C.llama_sampler_apply(smpl, ctypes.byref(arr))
            if math.isinf(cell[0].logit):
                return False
            if tok != eos:
                C.llama_sampler_accept(smpl, tok)
        return True
    finally:
        C.llama_sampler_free(smpl)


@pytest.fixture(scope="module")
def engine(default_model: Path) -> Iterator:
    from engine.backends.llama.engine import LlamaEngine

    # <filename> is one of SmolLM2's special tokens: rendered as text, as a family's markers are.
    eng = LlamaEngine(default_model, n_ctx=2048, preserved=("<filename>",))
    assert eng.ready.wait(60) and eng.load_error is None
    yield eng
    eng.close()


# --- the grammar text ----------------------------------------------------------------------


def test_every_family_has_a_grammar_and_a_request_is_forced_without_warning(caplog):
    from engine.chat.request import ChatRequest, Message

    req = ChatRequest(messages=(Message("user", "hi"),), tools=TOOLS, tool_choice="required")
    with caplog.at_level("WARNING", logger="prism"):
        for family in (*FAMILIES, "auto"):
            grammar = tool_grammar.request_grammar(req, family, "content")
            assert grammar and "root ::=" in grammar, family
    assert "not enforced" not in caplog.text
    with pytest.raises(ValueError, match="no tool named"):
        forced_call("mistral", TOOLS, "launch_rockets")


def test_special_markers_become_token_references():
    # gpt-oss's vocabulary: these are single tokens (ids as in o200k_harmony)
    ids = {"<|channel|>": 200005, "<|message|>": 200008, "<|constrain|>": 200003,
           "<|call|>": 200012, "<|end|>": 200007, "<|start|>": 200006}
    g = forced_call("harmony", TOOLS, "get_weather", reasoning=True, tokens=ids)
    assert ('<[200005]> "commentary to=functions.get_weather " <[200003]> "json" <[200008]>'
            in g)
    assert "<[200012]>" in g and '"<|' not in g
    # reasoning: text without <|end|> (the automaton over its text), the token, the next header
    assert "root ::= tc-think0 <[200007]> <[200006]> \"assistant\"" in g
    # Mistral's markers have no angle brackets: only the id form can name them
    g = forced_call("mistral", TOOLS, "search", tokens={"[TOOL_CALLS]": 9, "[ARGS]": 32})
    assert '<[9]> "search" <[32]>' in g and "TOOL_CALLS" not in g
    # DSML's token sits inside its tags
    g = forced_call("dsml", TOOLS, "search", tokens={"｜DSML｜": 128799})
    assert '"<" <[128799]> "function_calls>\\n"' in g


def test_key_value_families_type_each_property():
    g = forced_call("dsml", TOOLS, "get_weather")
    # the enum string is raw text (string="true"), the integer JSON (string="false")
    assert '"<｜DSML｜parameter name=\\"city\\" string=\\"true\\">" ("Paris" | "London")' in g
    assert 'parameter name=\\"days\\" string=\\"false\\">' in g
    # city is required, days optional
    assert '"<｜DSML｜invoke name=\\"get_weather\\">\\n" (' in g
    assert g.count(")?") >= 1


# --- the real model ------------------------------------------------------------------------


@pytest.mark.model
def test_special_ids_reads_the_vocabulary(engine):
    found = special_ids(engine, ("<filename>", "<|channel|>", "[TOOL_CALLS]", "plain"))
    assert list(found) == ["<filename>"]
    assert engine.detokenize([found["<filename>"]]) == "<filename>"
    # SmolLM2 has none of the families' special tokens: their markers stay text here
    for family in FAMILIES:
        assert special_ids(engine, preserved_tokens(family)) == {}, family


@pytest.mark.model
def test_a_token_reference_samples_that_token(engine):
    (tok_id,) = special_ids(engine, ("<filename>",)).values()
    w = tool_grammar.Writer({"<filename>": tok_id})
    grammar = f"root ::= {w.seq('<filename>a.py')}"
    assert grammar == f'root ::= <[{tok_id}]> "a.py"'
    tokens, _ = sample(engine, grammar, max_tokens=10)
    assert "".join(t.text for t in tokens) == "<filename>a.py"
    assert tokens[0].id == tok_id  # the special token itself, not "<", "filename", ">"
    # the same text quoted: never that token
    tokens, _ = sample(engine, 'root ::= "<filename>a.py"', max_tokens=10)
    assert tok_id not in [t.id for t in tokens]


@pytest.mark.model
@pytest.mark.parametrize("family", FAMILIES)
def test_llama_cpp_parses_every_variant(engine, family):
    for name in (None, "search"):
        for reasoning in (False, True):
            grammar_check(engine, forced_call(family, TOOLS, name, reasoning=reasoning))
    # with token references (ids in SmolLM2's range, as a real vocabulary's would be)
    ids = {text: 1 + i for i, text in enumerate(preserved_tokens(family))}
    grammar_check(engine, forced_call(family, TOOLS, None, reasoning=True, tokens=ids))


@pytest.mark.model
@pytest.mark.parametrize("family", FAMILIES)
def test_the_named_tool_is_called_once_in_the_familys_format(engine, family):
    tokens, fin = sample(engine, forced_call(family, TOOLS, "get_weather"),
                         max_tokens=120 * BUDGET.get(family, 1))
    text = "".join(t.text for t in tokens)
    assert fin.reason == "stop", text  # the grammar ended: only end-of-generation was left
    res = read(family, text)
    assert len(res.tool_calls) == 1, text
    check_call(res.tool_calls[0], {"get_weather"})
    assert res.content.strip() == "" and res.reasoning == "", text


@pytest.mark.model
@pytest.mark.parametrize("family", FAMILIES)
def test_required_gives_calls_to_declared_tools(engine, family):
    tokens, fin = sample(engine, forced_call(family, TOOLS),
                         max_tokens=120 * BUDGET.get(family, 1))
    text = "".join(t.text for t in tokens)
    res = read(family, text)
    assert res.tool_calls, text
    for call in res.tool_calls:
        check_call(call, {"get_weather", "search"})
    if fin.reason == "stop":
        assert res.content.strip() == "", text
    else:  # cut inside a further call: what is left is that call's beginning, never a call
        assert fin.reason == "length" and text.endswith(res.content), text
    if not FORMATS[family].several:
        assert len(res.tool_calls) == 1


# Reasoning before the call: SmolLM2 would not close a reasoning block of its own within any
# budget, so these are hand-written outputs that llama.cpp's sampler must take whole under the
# grammar, and that the family's parser must read as reasoning then the call.
THOUGHT = "The user wants Paris.\nI call get_weather."
REASONED = {
    "lfm2": '</think>\n\n<|tool_call_start|>[search(query="news")]<|tool_call_end|>',
    "granite": '</think>\n\n<|tool_call|>[{"name": "search", "arguments": {"query": "news"}}]',
    "nemotron-v2": ('</think>\n\n<TOOLCALL>[{"name": "search", "arguments": {"query": "news"}}]'
                    "</TOOLCALL>"),
    "qwen-xml": ("</think>\n\n<tool_call>\n<function=search>\n<parameter=query>\nnews\n"
                 "</parameter>\n</function>\n</tool_call>"),
    "harmony": ("<|end|><|start|>assistant<|channel|>commentary to=functions.search "
                '<|constrain|>json<|message|>{"query": "news"}<|call|>'),
    "deepseek": ('</think>\n\n<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>search<｜tool▁sep｜>'
                 '{"query": "news"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>'),
    "glm": ("</think>\n\n<tool_call>search\n<arg_key>query</arg_key>\n<arg_value>news"
            "</arg_value>\n</tool_call>"),
    "mistral": '[/THINK][TOOL_CALLS]search[ARGS]{"query": "news"}',
    "gemma4": '<channel|><|tool_call>call:search{query:<|"|>news<|"|>}<tool_call|>',
    "minimax-m3": ('</mm:think>]<]minimax[>[<tool_call>\n]<]minimax[>[<invoke name="search">'
                   "]<]minimax[>[<query>news]<]minimax[>[</query>]<]minimax[>[</invoke>\n"
                   "]<]minimax[>[</tool_call>"),
    "seed-oss": ("</seed:think>\n<seed:tool_call>\n<function=search>\n"
                 "<parameter=query>news</parameter>\n</function>\n</seed:tool_call>"),
    "minicpm5": '</think>\n\n<function name="search"><param name="query">news</param></function>',
    "hunyuan3": ("</think:opensource><tool_calls:opensource>\n"
                 "<tool_call:opensource>search<tool_sep:opensource>\n"
                 "<arg_key:opensource>query</arg_key:opensource>\n"
                 "<arg_value:opensource>news</arg_value:opensource>\n"
                 "</tool_call:opensource>\n</tool_calls:opensource>"),
}


REASONED["apertus"] = ('<|inner_suffix|><|tools_prefix|>[{"search": {"query": "news"}}]'
                       '<|tools_suffix|>')
REASONED["command-r7b"] = ('<|END_THINKING|><|START_ACTION|>[\n    {"tool_call_id": "0", '
                          '"tool_name": "search", "parameters": {"query": "news"}}\n]'
                          "<|END_ACTION|>")
REASONED["apriel"] = ('[BEGIN FINAL RESPONSE]\n<tool_calls>[{"name": "search", "arguments": '
                      '{"query": "news"}}]</tool_calls>')


@pytest.mark.model
@pytest.mark.parametrize("family", sorted(REASONED))
def test_reasoning_then_the_call(engine, family):
    grammar = forced_call(family, TOOLS, "search", reasoning=True)
    text = THOUGHT + REASONED[family]
    assert accepts(engine, grammar, text)
    p = OutputParser(start="reasoning", family=family, tools=list(TOOLS))
    res = result_of(p.feed(text) + p.finish())
    assert res.reasoning.strip() == THOUGHT
    assert [(c.name, c.arguments) for c in res.tool_calls] == [("search", {"query": "news"})]
    # the call is required after the reasoning, and the reasoning must not hold the closer
    assert not accepts(engine, grammar, THOUGHT)
    closer = markers(family).think_close
    assert REASONED[family].startswith(closer)
    assert not accepts(engine, grammar, "a" + closer + "b" + text)
    # without reasoning the same call is taken as is, not after free text
    plain = forced_call(family, TOOLS, "search")
    call = REASONED[family][len(closer):].lstrip("\n")
    if family == "harmony":
        call = call[len("<|start|>assistant"):]
    assert accepts(engine, plain, call)
    assert not accepts(engine, plain, "Sure. " + call)


TWO_CALLS = {
    "lfm2": ('<|tool_call_start|>[search(query="news"), get_weather(city="London", days=2)]'
             "<|tool_call_end|>"),
    "granite": ('<|tool_call|>[{"name": "search", "arguments": {"query": "news"}}, '
                '{"name": "get_weather", "arguments": {"city": "London", "days": 2}}]'),
    "nemotron-v2": ('<TOOLCALL>[{"name": "search", "arguments": {"query": "news"}}, '
                    '{"name": "get_weather", "arguments": {"city": "London", "days": 2}}]'
                    "</TOOLCALL>"),
    "llama3-json": ('{"name": "search", "parameters": {"query": "news"}}; '
                    '{"name": "get_weather", "parameters": {"city": "London", "days": 2}}'),
    "kimi-k2": ('<|tool_calls_section_begin|><|tool_call_begin|>functions.search:0'
                '<|tool_call_argument_begin|>{"query": "news"}<|tool_call_end|>'
                "<|tool_call_begin|>functions.get_weather:1<|tool_call_argument_begin|>"
                '{"city": "London", "days": 2}<|tool_call_end|><|tool_calls_section_end|>'),
    "minimax-xml": ('<minimax:tool_call>\n<invoke name="search">\n<parameter name="query">news'
                    '</parameter>\n</invoke>\n<invoke name="get_weather">\n<parameter name='
                    '"city">London</parameter>\n<parameter name="days">2</parameter>\n'
                    "</invoke>\n</minimax:tool_call>"),
    "minimax-m3": (']<]minimax[>[<tool_call>\n]<]minimax[>[<invoke name="search">'
                   "]<]minimax[>[<query>news]<]minimax[>[</query>]<]minimax[>[</invoke>\n"
                   ']<]minimax[>[<invoke name="get_weather">]<]minimax[>[<city>London'
                   "]<]minimax[>[</city>]<]minimax[>[<days>2]<]minimax[>[</days>]<]minimax[>["
                   "</invoke>\n]<]minimax[>[</tool_call>"),
    "seed-oss": ("<seed:tool_call>\n<function=search>\n<parameter=query>news</parameter>\n"
                 "</function>\n</seed:tool_call>\n<seed:tool_call>\n<function=get_weather>\n"
                 "<parameter=city>London</parameter>\n<parameter=days>2</parameter>\n"
                 "</function>\n</seed:tool_call>"),
    "minicpm5": ('<function name="search"><param name="query">news</param></function>\n'
                 '<function name="get_weather"><param name="city">London</param>'
                 '<param name="days">2</param></function>'),
    "hunyuan3": ("<tool_calls:opensource>\n<tool_call:opensource>search<tool_sep:opensource>\n"
                 "<arg_key:opensource>query</arg_key:opensource>\n"
                 "<arg_value:opensource>news</arg_value:opensource>\n</tool_call:opensource>\n"
                 "<tool_call:opensource>get_weather<tool_sep:opensource>\n"
                 "<arg_key:opensource>city</arg_key:opensource>\n"
                 "<arg_value:opensource>London</arg_value:opensource>\n"
                 "<arg_key:opensource>days</arg_key:opensource>\n"
                 "<arg_value:opensource>2</arg_value:opensource>\n</tool_call:opensource>\n"
                 "</tool_calls:opensource>"),
}


TWO_CALLS["apertus"] = ('<|tools_prefix|>[{"search": {"query": "news"}}, '
                        '{"get_weather": {"city": "London", "days": 2}}]<|tools_suffix|>')
TWO_CALLS["solar-open"] = (
    '<|tool_calls|><|tool_call:begin|>a1b2c3d4e5<|tool_call:name|>search<|tool_call:args|>'
    '{"query": "news"}<|tool_call:end|><|tool_call:begin|>f6g7h8i9j0<|tool_call:name|>'
    'get_weather<|tool_call:args|>{"city": "London", "days": 2}<|tool_call:end|>')
TWO_CALLS["command-r7b"] = (
    '<|START_ACTION|>[\n    {"tool_call_id": "0", "tool_name": "search", "parameters": '
    '{"query": "news"}},\n    {"tool_call_id": "1", "tool_name": "get_weather", "parameters": '
    '{"city": "London", "days": 2}}\n]<|END_ACTION|>')
TWO_CALLS["command-r-plus"] = (
    'Action:\n```json\n[\n    {\n        "tool_name": "search",\n        "parameters": '
    '{"query": "news"}\n    },\n    {\n        "tool_name": "get_weather",\n        '
    '"parameters": {"city": "London", "days": 2}\n    }\n]```')
TWO_CALLS["apriel"] = ('<tool_calls>[{"name": "search", "arguments": {"query": "news"}}, '
                       '{"name": "get_weather", "arguments": {"city": "London", "days": 2}}]'
                       '</tool_calls>')
TWO_CALLS["minimax-m1"] = ('<tool_calls>\n{"name": "search", "arguments": {"query": "news"}}\n'
                           '{"name": "get_weather", "arguments": {"city": "London", "days": 2}}'
                           "\n</tool_calls>")
TWO_CALLS["firefunction"] = (' functools[{"name": "search", "arguments": {"query": "news"}}, '
                             '{"name": "get_weather", "arguments": {"city": "London", "days": 2}}]')
TWO_CALLS["functionary-v3.1"] = ('<function=search>{"query": "news"}</function>'
                                 '<function=get_weather>{"city": "London", "days": 2}</function>')
# Functionary v3.2: the prompt ends with `>>>`, the first call starts with its name
TWO_CALLS["functionary-v3.2"] = ('search\n{"query": "news"}>>>get_weather\n'
                                 '{"city": "London", "days": 2}')


@pytest.mark.model
@pytest.mark.parametrize("family", sorted(TWO_CALLS))
def test_required_takes_several_calls_and_a_named_tool_one(engine, family):
    text = TWO_CALLS[family]
    assert accepts(engine, forced_call(family, TOOLS), text)
    assert not accepts(engine, forced_call(family, TOOLS, "search"), text)
    assert not accepts(engine, forced_call(family, TOOLS), text + "\nDone.")
    res = read(family, text)
    assert [(c.name, c.arguments) for c in res.tool_calls] == [
        ("search", {"query": "news"}), ("get_weather", {"city": "London", "days": 2})]


# Parallel calls off (OpenAI's `parallel_tool_calls: false`): "required" allows exactly one call,
# as llama.cpp's server writes `call` rather than `call+`.
ONE_CALL = {
    "lfm2": '<|tool_call_start|>[search(query="news")]<|tool_call_end|>',
    "granite": '<|tool_call|>[{"name": "search", "arguments": {"query": "news"}}]',
    "nemotron-v2": '<TOOLCALL>[{"name": "search", "arguments": {"query": "news"}}]</TOOLCALL>',
    "llama3-json": '{"name": "search", "parameters": {"query": "news"}}',
    "kimi-k2": ('<|tool_calls_section_begin|><|tool_call_begin|>functions.search:0'
                '<|tool_call_argument_begin|>{"query": "news"}<|tool_call_end|>'
                "<|tool_calls_section_end|>"),
    "minimax-xml": ('<minimax:tool_call>\n<invoke name="search">\n<parameter name="query">news'
                    '</parameter>\n</invoke>\n</minimax:tool_call>'),
    "minimax-m3": (']<]minimax[>[<tool_call>\n]<]minimax[>[<invoke name="search">'
                   "]<]minimax[>[<query>news]<]minimax[>[</query>]<]minimax[>[</invoke>\n"
                   "]<]minimax[>[</tool_call>"),
    "qwen-xml": ("<tool_call>\n<function=search>\n<parameter=query>\nnews\n</parameter>\n"
                 "</function>\n</tool_call>"),
    "seed-oss": ("<seed:tool_call>\n<function=search>\n<parameter=query>news</parameter>\n"
                 "</function>\n</seed:tool_call>"),
    "minicpm5": '<function name="search"><param name="query">news</param></function>',
    "hunyuan3": ("<tool_calls:opensource>\n<tool_call:opensource>search<tool_sep:opensource>\n"
                 "<arg_key:opensource>query</arg_key:opensource>\n"
                 "<arg_value:opensource>news</arg_value:opensource>\n</tool_call:opensource>\n"
                 "</tool_calls:opensource>"),
}
ONE_CALL["apertus"] = '<|tools_prefix|>[{"search": {"query": "news"}}]<|tools_suffix|>'
ONE_CALL["solar-open"] = ('<|tool_calls|><|tool_call:begin|>a1b2c3d4e5<|tool_call:name|>search'
                          '<|tool_call:args|>{"query": "news"}<|tool_call:end|>')
ONE_CALL["command-r7b"] = ('<|START_ACTION|>[\n    {"tool_call_id": "0", "tool_name": '
                          '"search", "parameters": {"query": "news"}}\n]<|END_ACTION|>')
ONE_CALL["command-r-plus"] = ('Action:\n```json\n[\n    {\n        "tool_name": "search",\n'
                              '        "parameters": {"query": "news"}\n    }\n]```')
ONE_CALL["apriel"] = '<tool_calls>[{"name": "search", "arguments": {"query": "news"}}]</tool_calls>'
ONE_CALL["minimax-m1"] = ('<tool_calls>\n{"name": "search", "arguments": {"query": "news"}}\n'
                          "</tool_calls>")
ONE_CALL["firefunction"] = ' functools[{"name": "search", "arguments": {"query": "news"}}]'
ONE_CALL["functionary-v3.1"] = '<function=search>{"query": "news"}</function>'
ONE_CALL["functionary-v3.2"] = 'search\n{"query": "news"}'
TWO_CALLS_QWEN = (ONE_CALL["qwen-xml"] + "\n<tool_call>\n<function=get_weather>\n<parameter=city>"
                  "\nLondon\n</parameter>\n<parameter=days>\n2\n</parameter>\n</function>\n"
                  "</tool_call>")


@pytest.mark.model
@pytest.mark.parametrize("family", sorted(ONE_CALL))
def test_required_without_parallel_calls_takes_exactly_one(engine, family):
    two = TWO_CALLS.get(family, TWO_CALLS_QWEN)
    one = ONE_CALL[family]
    single = forced_call(family, TOOLS, several=False)
    assert accepts(engine, forced_call(family, TOOLS), two)  # the same text, parallel on
    assert not accepts(engine, single, two)
    assert accepts(engine, single, one)
    assert [c.name for c in read(family, one).tool_calls] == ["search"]


def test_request_grammar_reads_parallel_calls():
    from engine.chat.request import ChatRequest, Message

    msgs = (Message("user", "hi"),)
    on = ChatRequest(msgs, tools=TOOLS, tool_choice="required")
    off = ChatRequest(msgs, tools=TOOLS, tool_choice="required", parallel_calls=False)
    g_on = tool_grammar.request_grammar(on, "qwen-xml", "content")
    g_off = tool_grammar.request_grammar(off, "qwen-xml", "content")
    assert g_on == forced_call("qwen-xml", TOOLS)
    assert g_off == forced_call("qwen-xml", TOOLS, several=False)
    assert g_on != g_off
