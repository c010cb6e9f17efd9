"""app/api/tool_choice.py and engine/grammar/: tool_choice in the three APIs' spellings,
refused when unknown and enforced with a grammar in the pack's family when it forces a call;
and the other "accepted but wrong" inputs of issue 10, item 6 (max_completion_tokens 0,
tool schemas that are not JSON Schemas, image parts, --max-queue 0).

The replay engine ignores grammars, so the replay tests check the grammar each job carries
(and that llama.cpp parses it); the `model` tests check that SmolLM2 under it really calls.
"""

from __future__ import annotations

import json

import anthropic
import openai
import pytest

from app.cli import main as cli_main
from tests.app.conftest import TOOLS, WEATHER, xml_call

ASK = [{"role": "user", "content": "Weather in Paris?"}]
REPLY = "Ok.\n</think>\n\nfine"
CALL = xml_call("get_weather", city="Paris")
ANTHROPIC_TOOLS = [{"name": t["function"]["name"], "description": t["function"]["description"],
                    "input_schema": t["function"]["parameters"]} for t in TOOLS]
RESPONSES_TOOLS = [{"type": "function", **t["function"]} for t in TOOLS]


@pytest.fixture(scope="module")
def parses(default_model):
    """llama.cpp's own grammar parser, run against the default model's vocabulary: a GBNF it
    rejects fails the test. (llama-cpp-python 0.3's `LlamaGrammar.from_string` no longer
    parses the text, so it cannot serve as the check.)"""
    import llama_cpp as C

    from engine.backends.llama.vocab import Vocab

    vocab = Vocab(default_model)

    def check(grammar: str) -> None:
        g = C.llama_sampler_init_grammar(vocab._model.vocab, grammar.encode(), b"root")
        assert g, f"llama.cpp rejects the grammar: {grammar[:400]}"
        C.llama_sampler_free(g)

    yield check
    vocab.close()


# --- refused -------------------------------------------------------------------------------


@pytest.mark.parametrize(("choice", "param"), [
    ("sometimes", "tool_choice"),
    ({"type": "function", "function": {"name": "launch_rockets"}}, "tool_choice.function.name"),
    ({"type": "function"}, "tool_choice.function.name"),
    ({"type": "allowed_tools"}, "tool_choice"),
])
def test_openai_unknown_tool_choice_is_400(serve, choice, param):
    live = serve(REPLY)
    with pytest.raises(openai.BadRequestError) as e:
        live.openai().chat.completions.create(model="m", messages=ASK, tools=TOOLS,
                                              tool_choice=choice)
    assert e.value.body["param"] == param and e.value.body["code"] == "invalid_tool_choice"
    assert live.runs == []


def test_required_without_tools_is_400(serve):
    live = serve(REPLY)
    with pytest.raises(openai.BadRequestError) as e:
        live.openai().chat.completions.create(model="m", messages=ASK, tool_choice="required")
    assert "no tools" in e.value.body["message"]


@pytest.mark.parametrize("choice", [{"type": "sometimes"}, {"type": "tool", "name": "nope"},
                                    {"type": "tool"}])
def test_anthropic_unknown_tool_choice_is_400(serve, choice):
    live = serve(REPLY)
    with pytest.raises(anthropic.BadRequestError) as e:
        live.anthropic().messages.create(model="m", max_tokens=20, messages=ASK,
                                         tools=ANTHROPIC_TOOLS, tool_choice=choice)
    assert e.value.body["error"]["type"] == "invalid_request_error"
    assert "tool_choice" in e.value.body["error"]["message"]


@pytest.mark.parametrize("choice", ["sometimes", {"type": "web_search_preview"},
                                    {"type": "function", "name": "nope"}])
def test_responses_unknown_tool_choice_is_400(serve, choice):
    live = serve(REPLY)
    with pytest.raises(openai.BadRequestError) as e:
        live.openai().responses.create(model="m", input="hi", tools=RESPONSES_TOOLS,
                                       tool_choice=choice)
    assert e.value.body["param"].startswith("tool_choice")


# --- enforced --------------------------------------------------------------------------------


def test_openai_required_and_named_carry_a_grammar_in_the_packs_family(serve, parses):
    live = serve(CALL, CALL, CALL)
    client = live.openai()
    resp = client.chat.completions.create(model="m", messages=ASK, tools=TOOLS,
                                          tool_choice="required")
    assert resp.choices[0].finish_reason == "tool_calls"
    grammar = live.last.job.grammar
    parses(grammar)
    assert "<function=get_weather>" in grammar and "<function=search>" in grammar
    assert live.last.request.tool_choice == "required"
    # a forced call with no stated thinking is answered without it (qwen3-xml thinks by default)
    assert live.last.start_state == "content"

    client.chat.completions.create(model="m", messages=ASK, tools=TOOLS, tool_choice={
        "type": "function", "function": {"name": "search"}})
    grammar = live.last.job.grammar
    parses(grammar)
    assert "<function=search>" in grammar and "get_weather" not in grammar
    assert live.last.request.tool_name == "search"

    client.chat.completions.create(model="m", messages=ASK, tools=TOOLS, tool_choice="auto")
    assert live.last.job.grammar is None


def test_forced_call_after_stated_thinking_keeps_the_reasoning(serve, parses):
    live = serve("Let me see.\n</think>\n\n" + CALL)
    live.openai().chat.completions.create(
        model="m", messages=ASK, tools=TOOLS, tool_choice="required",
        extra_body={"chat_template_kwargs": {"enable_thinking": True}})
    assert live.last.start_state == "reasoning"
    grammar = live.last.job.grammar
    parses(grammar)
    assert 'root ::= tc-think0 "</think>' in grammar


def test_anthropic_any_and_tool_are_enforced(serve, parses):
    live = serve(CALL, CALL, REPLY)
    client = live.anthropic()
    msg = client.messages.create(model="m", max_tokens=50, messages=ASK, tools=ANTHROPIC_TOOLS,
                                 tool_choice={"type": "any"})
    assert msg.stop_reason == "tool_use"
    assert live.last.request.tool_choice == "required"
    parses(live.last.job.grammar)
    client.messages.create(model="m", max_tokens=50, messages=ASK, tools=ANTHROPIC_TOOLS,
                           tool_choice={"type": "tool", "name": "get_weather"})
    assert live.last.request.tool_name == "get_weather"
    assert "search" not in live.last.job.grammar
    client.messages.create(model="m", max_tokens=50, messages=ASK, tools=ANTHROPIC_TOOLS,
                           tool_choice={"type": "none"})
    assert live.last.request.tools == () and live.last.job.grammar is None


def test_responses_named_function_is_enforced(serve, parses):
    live = serve(CALL)
    live.openai().responses.create(model="m", input="hi", tools=RESPONSES_TOOLS,
                                   tool_choice={"type": "function", "name": "get_weather"})
    assert live.last.request.tool_name == "get_weather"
    parses(live.last.job.grammar)


def test_hermes_packs_get_a_json_call_grammar(serve, parses):
    live = serve('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n'
                 "</tool_call>", pack="smollm2")
    resp = live.openai().chat.completions.create(model="m", messages=ASK, tools=[WEATHER],
                                                 tool_choice="required")
    assert resp.choices[0].message.tool_calls[0].function.name == "get_weather"
    grammar = live.last.job.grammar
    parses(grammar)
    assert '{\\"name\\": \\"get_weather\\", \\"arguments\\": ' in grammar
    assert '\\"city\\"' in grammar  # the arguments follow the tool's schema


def test_a_harmony_pack_is_forced_in_harmonys_own_call_format(serve, caplog, parses):
    # Every family has its own forced-call grammar (engine/grammar/): a harmony pack
    # samples under gpt-oss's commentary-channel call, never Hermes' <tool_call>, and nothing
    # says the choice is not enforced. The replay engine has no vocabulary, so the markers are
    # text here (tests/engine/grammar/test_tools.py samples the grammars on the real model).
    call = ("<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>"
            '{"city": "Paris"}<|call|>')
    live = serve(call, call, pack="harmony")
    with caplog.at_level("WARNING", logger="prism"):
        resp = live.openai().chat.completions.create(model="m", messages=ASK, tools=[WEATHER],
                                                     tool_choice="required")
    grammar = live.last.job.grammar
    parses(grammar)
    assert '"<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>"' \
        in grammar
    assert "<tool_call>" not in grammar
    assert resp.choices[0].message.tool_calls[0].function.name == "get_weather"
    assert "not enforced" not in caplog.text
    live.anthropic().messages.create(model="m", max_tokens=50, messages=ASK, tools=[
        {"name": "get_weather", "input_schema": WEATHER["function"]["parameters"]}],
        tool_choice={"type": "tool", "name": "get_weather"})
    assert "to=functions.get_weather" in live.last.job.grammar


@pytest.mark.model
def test_the_real_model_calls_when_told_to(default_model):
    """SmolLM2 on its own rarely writes a call for this prompt; under the grammar it must."""
    from app.api.server import ServerThread
    from app.api.state import AppState, ServerConfig
    from engine.backends.llama.engine import LlamaEngine
    from engine.chat.packs import resolve_pack
    from engine.metrics import Metrics
    from engine.service import Service

    pack = resolve_pack("smollm2")
    engine = LlamaEngine(pack.gguf, n_ctx=2048)
    service = Service(engine, pack, metrics=Metrics(engine))
    server = ServerThread(AppState(service=service, config=ServerConfig())).start()
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="x", max_retries=0,
                           timeout=120)
    try:
        ask = [{"role": "user", "content": "Say hello."}]
        for choice, name in (("required", None),
                             ({"type": "function", "function": {"name": "search"}}, "search")):
            resp = client.chat.completions.create(model="m", messages=ask, tools=TOOLS,
                                                  tool_choice=choice, temperature=0,
                                                  max_tokens=80)
            calls = resp.choices[0].message.tool_calls
            assert resp.choices[0].finish_reason == "tool_calls", resp.choices[0].message
            assert calls and calls[0].function.name in ({name} if name else
                                                        {"get_weather", "search"})
            args = json.loads(calls[0].function.arguments)
            assert isinstance(args, dict)
            if calls[0].function.name == "search":
                assert set(args) <= {"query"}
    finally:
        client.close()
        server.stop()
        engine.close()


# --- other inputs accepted but wrong ----------------------------------------------------------


def test_max_completion_tokens_zero_is_400_not_unset(serve):
    live = serve(REPLY)
    with pytest.raises(openai.BadRequestError) as e:
        live.openai().chat.completions.create(model="m", messages=ASK, max_completion_tokens=0,
                                              max_tokens=50)
    assert e.value.body["param"] == "max_completion_tokens"
    assert live.runs == []
    live.openai().chat.completions.create(model="m", messages=ASK, max_completion_tokens=7)
    assert live.last.request.max_tokens == 7


BAD_SCHEMAS = [
    {"type": "object", "properties": {"city": {"type": "strng"}}},
    {"type": "object", "required": "city"},
    {"type": "string"},
]


@pytest.mark.parametrize("schema", BAD_SCHEMAS)
def test_tool_parameters_that_are_not_a_json_schema_are_400(serve, schema):
    live = serve(REPLY)
    tool = {"type": "function", "function": {"name": "f", "parameters": schema}}
    with pytest.raises(openai.BadRequestError) as e:
        live.openai().chat.completions.create(model="m", messages=ASK, tools=[tool])
    assert e.value.body["param"] == "tools[0].function.parameters"
    with pytest.raises(anthropic.BadRequestError) as e2:
        live.anthropic().messages.create(model="m", max_tokens=5, messages=ASK, tools=[
            {"name": "f", "input_schema": schema}])
    assert "tools[0].input_schema" in e2.value.body["error"]["message"]
    with pytest.raises(openai.BadRequestError) as e3:
        live.openai().responses.create(model="m", input="hi", tools=[
            {"type": "function", "name": "f", "parameters": schema}])
    assert e3.value.body["param"] == "tools[0].parameters"
    assert live.runs == []


def test_image_parts_are_refused_naming_the_lack_of_vision(serve):
    live = serve(REPLY)
    image = "data:image/png;base64,iVBORw0KGgo="
    with pytest.raises(openai.BadRequestError) as e:
        live.openai().chat.completions.create(model="m", messages=[{"role": "user", "content": [
            {"type": "text", "text": "What is this?"},
            {"type": "image_url", "image_url": {"url": image}}]}])
    assert e.value.body["param"] == "messages[0].content[1]"
    assert "vision" in e.value.body["message"]
    with pytest.raises(anthropic.BadRequestError) as e2:
        live.anthropic().messages.create(model="m", max_tokens=5, messages=[
            {"role": "user", "content": [{"type": "image", "source": {
                "type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}]}])
    assert "vision" in e2.value.body["error"]["message"]
    with pytest.raises(openai.BadRequestError) as e3:
        live.openai().responses.create(model="m", input=[{"role": "user", "content": [
            {"type": "input_image", "image_url": image}]}])
    assert "vision" in e3.value.body["message"]
    assert live.runs == []


@pytest.mark.parametrize("value", ["0", "-3"])
def test_max_queue_below_one_is_refused_at_the_flag(value, capsys):
    with pytest.raises(SystemExit) as e:
        cli_main(["serve", "--replay", "none.txt", "--max-queue", value])
    assert e.value.code == 2 and "--max-queue" in capsys.readouterr().err
