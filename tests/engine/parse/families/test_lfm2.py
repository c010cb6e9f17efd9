"""engine/parse/families/lfm2.py (LFM2, LFM2.5): every parser rule
(tests/engine/parse/family_rules.py) and the family's own cases, each parsed at every chunking,
stream_tools off and on. The cases come from the real templates (LFM2-8B-A1B.jinja,
LFM2.5-8B-A1B.jinja, LFM2.5-Instruct.jinja; the pack's lfm2.jinja is LFM2.5-8B-A1B's), from
llama.cpp's tests/test-chat.cpp (test_lfm2_parser) and from vLLM's
tests/tool_parsers/test_lfm2_tool_parser.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.chat.detect import detect, start_state
from engine.chat.packs import TEMPLATES, resolve_pack
from engine.chat.request import Message
from engine.parse.events import TOOL_ARGS
from engine.parse.families import lfm2
from tests.engine.parse.family_harness import read_all_ways
from tests.engine.parse.family_rules import RULES, Family
from tests.engine.parse.parser_harness import anomalies, parse_all_ways, run

SHARED = Path(__file__).resolve().parents[5] / "shared" / "templates"
REAL = {"LFM2-8B-A1B.jinja", "LFM2.5-8B-A1B.jinja", "LFM2.5-Instruct.jinja"}
START, END = "<|tool_call_start|>", "<|tool_call_end|>"


def _value(v) -> str:
    return json.dumps(v) if isinstance(v, str) else repr(v)


def call(name: str, args: dict) -> str:
    """One call in a list of one, strings double-quoted (as llama.cpp's tests write them)."""
    return f"{START}[{name}({', '.join(f'{k}={_value(v)}' for k, v in args.items())})]{END}"


FAMILY = Family("lfm2", call, f'{START}[get_weather(city="Paris", 3)]{END}')

TOOLS = [{"type": "function", "function": {"name": n, "parameters": {
    "type": "object", "properties": props}}} for n, props in (
    ("special_function", {"arg1": {"type": "integer"}}),
    ("special_function_with_opt", {"arg1": {"type": "integer"}, "arg2": {"type": "integer"}}),
    ("get_time", {"city": {"type": "string"}}),
    ("toggle", {"enabled": {"type": "boolean"}}),
    ("set_nullable", {"value": {"type": "null"}}),
    ("set_config", {"config": {"type": "object"}}),
    ("python", {"code": {"type": "string"}}),
    ("empty_args", {}),
    ("set_date", {"month": {"type": "integer"}, "day": {"type": "integer"}}),
    ("get_weather", {"city": {"type": "string"}, "zip": {"type": "string"},
                     "days": {"type": "integer"}}),
)]


def parse(text: str, **kw):
    kw.setdefault("start", "content")
    kw.setdefault("tools", TOOLS)
    return parse_all_ways(text, family="lfm2", **kw)


def calls(res) -> list:
    return [(c.name, c.arguments) for c in res.tool_calls]


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.__name__)
def test_rule(rule):
    rule(FAMILY)


# --- llama.cpp's cases (tests/test-chat.cpp, test_lfm2_parser) ----------------------------------


@pytest.mark.parametrize(("body", "want"), [
    ("special_function(arg1=1)", ("special_function", {"arg1": 1})),
    ('get_time(city="XYZCITY")', ("get_time", {"city": "XYZCITY"})),
    ("toggle(enabled=True)", ("toggle", {"enabled": True})),
    ("set_nullable(value=None)", ("set_nullable", {"value": None})),
    ('set_config(config={"enabled": True, "count": 3})',
     ("set_config", {"config": {"enabled": True, "count": 3}})),
    ('set_config(config={"enabled": true, "note": null})',  # JSON's words too
     ("set_config", {"config": {"enabled": True, "note": None}})),
    ("python(code=\"def hello():\\n    print('hey')\")",
     ("python", {"code": "def hello():\n    print('hey')"})),
    ('python(code="First line\\nSecond line\\tindented")',
     ("python", {"code": "First line\nSecond line\tindented"})),
    ('python(code="print(\\"hi\\")")', ("python", {"code": 'print("hi")'})),
    ("empty_args()", ("empty_args", {})),
])
def test_llama_cpp_calls(body, want):
    res = parse(f"{START}[{body}]{END}")
    assert calls(res) == [want] and res.content == "" and not anomalies(res)


def test_llama_cpp_dotted_name_and_structured_arguments():
    res = parse(f'{START}[Calendar.create_event(title="demo", participants=["Alice", "Bob"], '
                f'metadata={{"priority": "high", "reminder": true}})]{END}', tools=())
    assert calls(res) == [("Calendar.create_event", {
        "title": "demo", "participants": ["Alice", "Bob"],
        "metadata": {"priority": "high", "reminder": True}})]


def test_llama_cpp_thinking_then_call_and_content_before_a_call():
    res = parse(f"<think>I'm\nthinking</think>{START}[special_function(arg1=1)]{END}")
    assert (res.reasoning, res.content, calls(res)) == (
        "I'm\nthinking", "", [("special_function", {"arg1": 1})])
    res = parse(f'Let me check the time.{START}[get_time(city="Paris")]{END}')
    assert res.content == "Let me check the time." and calls(res) == [
        ("get_time", {"city": "Paris"})]


def test_llama_cpp_parallel_calls_and_a_partial_one():
    res = parse(f"{START}[special_function(arg1=1), special_function_with_opt(arg1=1, arg2=2)]"
                f"{END}")
    assert calls(res) == [("special_function", {"arg1": 1}),
                          ("special_function_with_opt", {"arg1": 1, "arg2": 2})]
    assert [c.index for c in res.tool_calls] == [0, 1]
    text = f"{START}[special_function(arg1="
    res = parse(text)
    assert res.tool_calls == () and res.content == text
    assert anomalies(res) == {"unfinished_call": 1}


def test_llama_cpp_markdown_links_stay_content():
    text = "Use this format: [link text](url). Example: [Wikipedia](https://www.wikipedia.org)."
    res = parse(text)
    assert res.content == text and res.tool_calls == ()


# --- vLLM's cases (tests/tool_parsers/test_lfm2_tool_parser.py) ---------------------------------


@pytest.mark.parametrize(("body", "want"), [
    ("get_candidate_status(candidate_id='12345')",
     ("get_candidate_status", {"candidate_id": "12345"})),
    ("register_user(name='John Doe', age=37, address={'city': 'San Francisco', 'state': 'CA'}, "
     "role=None, passed_test=True, aliases=['John', 'Johnny'])",
     ("register_user", {"name": "John Doe", "age": 37,
                        "address": {"city": "San Francisco", "state": "CA"}, "role": None,
                        "passed_test": True, "aliases": ["John", "Johnny"]})),
    ("do_something_cool(additional_data={})", ("do_something_cool", {"additional_data": {}})),
    ("do_something_cool(steps=[])", ("do_something_cool", {"steps": []})),
    ("label(tags={'urgent', 'bug'})", ("label", {"tags": ["urgent", "bug"]})),
    (r"get_weather(city='Martha\'s Vineyard', metric='\"cool units\"')",
     ("get_weather", {"city": "Martha's Vineyard", "metric": '"cool units"'})),
    ("grocery.orderIngredients(ingredientList=[{'name': 'Lasagna noodles', 'amount': 250, "
     "'unit': 'g'}], deliveryAddress='845 Willow Lane, Springfield, IL 62704')",
     ("grocery.orderIngredients", {
         "ingredientList": [{"name": "Lasagna noodles", "amount": 250, "unit": "g"}],
         "deliveryAddress": "845 Willow Lane, Springfield, IL 62704"})),
    ("exec(command='grep -F \"]\" log.txt')", ("exec", {"command": 'grep -F "]" log.txt'})),
])
def test_vllm_calls(body, want):
    res = parse(f"{START}[{body}]{END}", tools=())
    assert calls(res) == [want] and not anomalies(res)


def test_vllm_raw_newline_and_nul_in_a_string_are_repaired():
    res = parse(f"{START}[exec(command='cat > f.py << EOF\nimport csv\nprint(1)\nEOF')]{END}",
                tools=())
    assert calls(res) == [("exec", {"command": "cat > f.py << EOF\nimport csv\nprint(1)\nEOF"})]
    assert anomalies(res) == {"repaired_call": 1}
    res = parse(f"{START}[exec(command='printf a\x00b')]{END}", tools=())
    assert calls(res) == [("exec", {"command": "printf a\x00b"})]


def test_vllm_zero_padded_integers():
    res = parse(f"{START}[set_date(month=07, day=05)]{END}")
    assert calls(res) == [("set_date", {"month": 7, "day": 5})]
    assert anomalies(res) == {"repaired_call": 1}


def test_vllm_content_after_the_call_and_whitespace_after_the_opener():
    res = parse(f"{START} [get_time(city='Paris')]{END}\nChecking the status.")
    assert calls(res) == [("get_time", {"city": "Paris"})]
    assert res.content == "Checking the status."


def test_vllm_a_bad_sibling_call_keeps_the_good_ones():
    text = f"{START}[get_time(city='Paris'), bad(x=b'z')]{END}"
    res = parse(text)
    assert calls(res) == [("get_time", {"city": "Paris"})]
    assert res.anomalies["malformed_call"] == 1 and res.content.endswith(f"bad(x=b'z')]{END}")


def test_vllm_three_calls_one_of_them_empty():
    res = parse(f"{START}[get_time(city='12345'), empty_args(), set_config(config=[])]{END}")
    assert [c.name for c in res.tool_calls] == ["get_time", "empty_args", "set_config"]


def test_vllm_nested_quotes_and_an_echoed_list_are_not_guessed_at():
    text = f"{START}[exec(command='sed -n '360,450p' f.py')]{END}"
    res = parse(text, tools=())
    assert res.tool_calls == () and res.content == text
    assert anomalies(res) == {"malformed_call": 1}
    body = "[get_time(city='Oslo')]"
    res = parse(f"{START}{body}{END}{body}{END}")
    assert calls(res) == [("get_time", {"city": "Oslo"})] and res.content == body + END


def test_an_empty_list_is_text():
    text = f"{START}[]{END}"
    res = parse(text)
    assert res.content == text and res.tool_calls == () and not anomalies(res)


# --- the family's own cases ---------------------------------------------------------------------


def test_what_the_real_template_writes_is_read_back():
    """LFM2.5-8B-A1B's template (the pack's lfm2.jinja): single-quoted strings, a dict as
    JSON, a list as Python writes it, reasoning in `<think>` right before the answer."""
    pack = resolve_pack("lfm2", require_model=False)
    tmpl = pack.chat_template()
    tool = {"type": "function", "function": {"name": "plan", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}, "opts": {"type": "object"},
                                         "stops": {"type": "array"}, "fast": {"type": "boolean"},
                                         "n": {"type": "integer"}}}}}
    args = {"city": "Paris", "opts": {"a": True, "b": None}, "stops": ["x", 2], "fast": False,
            "n": 3}
    ask = [Message("user", "Plan it.")]
    turn = Message("assistant", "Planning.", reasoning_content="Need a plan.", tool_calls=(
        {"id": "c0", "type": "function", "function": {"name": "plan", "arguments": args}},
        {"id": "c1", "type": "function", "function": {"name": "plan", "arguments": {}}}))
    prompt = tmpl.render(ask, tools=[tool])
    assert prompt.endswith("<|im_start|>assistant\n") and start_state(prompt, "lfm2") == "content"
    whole = tmpl.render([*ask, turn], tools=[tool], add_generation_prompt=False)
    written = whole[len(prompt):].removesuffix("<|im_end|>\n")
    assert "city='Paris'" in written and '{"a": true, "b": null}' in written
    res = parse(written, tools=[tool])
    assert (res.reasoning, res.content) == ("Need a plan.", "Planning.")
    assert calls(res) == [("plan", args), ("plan", {})] and not anomalies(res)


def test_a_call_in_the_reasoning_ends_it():
    res = parse(f"I need the time.\n{START}[get_time(city='Oslo')]{END}", start="reasoning")
    assert res.reasoning == "I need the time." and calls(res) == [("get_time", {"city": "Oslo"})]
    assert anomalies(res) == {"implicit_reasoning_end": 1}


def test_a_json_element_is_read_too():
    res = parse(f'{START}[{{"name": "get_time", "arguments": {{"city": "Rome"}}}}, '
                f'get_time(city="Oslo")]{END}')
    assert calls(res) == [("get_time", {"city": "Rome"}), ("get_time", {"city": "Oslo"})]


@pytest.mark.parametrize(("body", "want", "repair"), [
    ("get_weather(city=Paris)", {"city": "Paris"}, "unquoted string"),
    ("get_weather(city=42)", {"city": "42"}, "unquoted string"),
    ("get_weather(zip=02134)", {"zip": "02134"}, "unquoted string"),
    ("get_weather(days=3, city='42')", {"days": 3, "city": "42"}, None),
    ("get_weather(days='3')", {"days": "3"}, None),  # a literal is its own type
])
def test_values_are_typed_by_their_literal_then_the_schema(body, want, repair):
    res = parse(f"{START}[{body}]{END}")
    assert calls(res) == [("get_weather", want)]
    got = [e.text for e in run(f"{START}[{body}]{END}", family="lfm2", tools=TOOLS,
                               start="content") if e.anomaly == "repaired_call"]
    assert got == ([repair] if repair else [])


@pytest.mark.parametrize("body", [
    "get_weather('Paris')",  # positional
    "get_weather(**{'city': 'Paris'})",
    "get_weather(city='Paris', city='Oslo')",
    "get_weather(city=Paris if x else y)",
    "get_weather(city==1)",
    "get_weather(city=[1, 2)",
])
def test_what_is_not_keyword_literals_is_malformed(body):
    text = f"{START}[{body}]{END}"
    res = parse(text)
    assert res.tool_calls == () and res.content == text
    assert anomalies(res) == {"malformed_call": 1}


def test_python_strings_in_every_quoting():
    res = parse(f'{START}[python(code="""a "quoted" line\nand \'another\'""")]{END}')
    assert calls(res) == [("python", {"code": "a \"quoted\" line\nand 'another'"})]
    assert not anomalies(res)
    res = parse(f"{START}[python(code=r'\\d+\\.', x='\\d')]{END}", tools=())
    assert calls(res) == [("python", {"code": "\\d+\\.", "x": "\\d"})]


def test_a_keyword_that_python_reserves_is_an_argument():
    res = parse(f"{START}[memory_get(from=1, class='x')]{END}", tools=())
    assert calls(res) == [("memory_get", {"from": 1, "class": "x"})]


def test_a_list_left_open_is_repaired_or_accepted_at_the_end():
    res = parse(f"{START}[get_time(city='Oslo'){END}")
    assert calls(res) == [("get_time", {"city": "Oslo"})]
    assert anomalies(res) == {"repaired_call": 1}
    res = parse(f"{START}[get_time(city='Oslo')]")
    assert calls(res) == [("get_time", {"city": "Oslo"})] and not anomalies(res)


def test_each_argument_streams_as_soon_as_its_value_is_complete():
    text = f"{START}[get_weather(city='Paris', days=3)]{END}"
    args = [e.text for e in run(text, family="lfm2", tools=TOOLS, start="content",
                                stream_tools=True) if e.kind == TOOL_ARGS]
    assert args == ['{"city": "Paris"', ', "days": 3', "}"]


def test_reader_directly():
    p = read_all_ways(lfm2, "[f(a=1, b='x,)'), g()] tail")
    assert (p.name, p.arguments, p.end) == ("f", {"a": 1, "b": "x,)"}, len("[f(a=1, b='x,)'),"))
    assert p.follow() is not None
    p = read_all_ways(lfm2, "[f(1)]")
    assert p.error and "positional" in p.error


def test_the_prompt_never_opens_the_reasoning():
    pack = resolve_pack("lfm2", require_model=False)
    for thinking in (None, True, False):
        prompt = pack.chat_template().render([Message("user", "hi")], enable_thinking=thinking)
        assert prompt.endswith("<|im_start|>assistant\n")
        assert start_state(prompt, "lfm2") == "content"


def test_detected_from_each_lfm_marker():
    for marker in (START, "<|tool_list_start|>", "List of tools: ["):
        assert detect("{{ '" + marker + "' }}").family == "lfm2"
    assert detect((TEMPLATES / "lfm2.jinja").read_text("utf-8")).family == "lfm2"


@pytest.mark.skipif(not SHARED.is_dir(), reason="needs ../shared/templates (the real templates)")
def test_only_the_lfm_templates_are_detected_as_lfm2():
    found = {p.name for p in SHARED.glob("*.jinja")
             if detect(p.read_text("utf-8")).family == "lfm2"}
    assert found == REAL
    real = (SHARED / "LFM2.5-8B-A1B.jinja").read_text("utf-8")
    assert (TEMPLATES / "lfm2.jinja").read_text("utf-8").endswith(real)  # a header, unchanged


def test_writer_values_are_python_literals_read_back():
    for v in ("it's \"quoted\"\n", True, None, 1.5, [1, "a", {"k": False}], {"x": [None]}):
        assert lfm2.literal(lfm2.write_value(v)) == v
