"""The 71 real chat templates of llama.cpp's library (../shared/templates, issue 19): each is
detected as the family whose syntax its model writes (never a neighbour through one shared
marker; a template that offers tools in a format no family reads would be "format unknown"),
and an agent's round trip works on it: a call written in the family's syntax is read back as
a call by the family's parser, and that call, sent back with its tool result, renders in the
template's history."""

from __future__ import annotations

import pytest

from engine.chat.detect import detect
from engine.chat.request import Message
from engine.chat.template import ChatTemplate
from engine.parse import families
from engine.parse.events import ToolCall
from tests.engine.parse.parser_harness import parse_all_ways
from tests.support import LIBRARY

pytestmark = pytest.mark.skipif(not LIBRARY.is_dir(),
                                reason="needs ../shared/templates (llama.cpp's library)")

# template -> the family its model writes ("auto": the template offers no tools, so its model
# writes no calls; auto still reads a `<tool_call>` if one comes).
EXPECTED = {
    "Apertus-8B-Instruct.jinja": "apertus",
    "Apriel-1.6-15b-Thinker-fixed.jinja": "apriel",
    "Bielik-11B-v3.0-Instruct.jinja": "hermes-json",
    "ByteDance-Seed-OSS.jinja": "seed-oss",
    "Cohere2MoE.jinja": "command-r7b",
    "CohereForAI-c4ai-command-r-plus-tool_use.jinja": "command-r-plus",
    "CohereForAI-c4ai-command-r7b-12-2024-tool_use.jinja": "command-r7b",
    "GLM-4.6.jinja": "glm",
    "GLM-4.7-Flash.jinja": "glm",
    "GigaChat3-10B-A1.8B.jinja": "gigachat3",
    "GigaChat3.1-10B-A1.8B.jinja": "gigachat3.1",
    "HuggingFaceTB-SmolLM3-3B.jinja": "auto",
    "Kimi-K2-Instruct.jinja": "kimi-k2",
    "Kimi-K2-Thinking.jinja": "kimi-k2",
    "Kimi-K3.jinja": "kimi-k3",
    "LFM2-8B-A1B.jinja": "lfm2",
    "LFM2.5-8B-A1B.jinja": "lfm2",
    "LFM2.5-Instruct.jinja": "lfm2",
    "MiMo-VL.jinja": "hermes-json",
    "MiniMax-M1.jinja": "minimax-m1",
    "MiniMax-M2.jinja": "minimax-xml",
    "MiniMax-M3.jinja": "minimax-m3",
    "Mistral-Small-3.2-24B-Instruct-2506.jinja": "mistral",
    "NVIDIA-Nemotron-3-Nano-30B-A3B-BF16.jinja": "qwen-xml",
    "NVIDIA-Nemotron-Nano-v2.jinja": "nemotron-v2",
    "NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use.jinja": "hermes-json",
    "NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja": "hermes-json",
    "Qwen-QwQ-32B.jinja": "hermes-json",
    "Qwen-Qwen2.5-7B-Instruct.jinja": "hermes-json",
    "Qwen-Qwen3-0.6B.jinja": "hermes-json",
    "Qwen3-Coder.jinja": "qwen-xml",
    "Qwen3.5-4B.jinja": "qwen-xml",
    "Reka-Edge.jinja": "hermes-json",
    "Spark2.5.jinja": "glm",
    "StepFun3.5-Flash.jinja": "qwen-xml",
    "deepseek-ai-DeepSeek-R1-Distill-Llama-8B.jinja": "deepseek",
    "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja": "deepseek",
    "deepseek-ai-DeepSeek-V3.1.jinja": "deepseek",
    "deepseek-ai-DeepSeek-V3.2.jinja": "dsml",
    "deepseek-ai-DeepSeek-V4-Flash-0731.jinja": "dsml",
    "deepseek-ai-DeepSeek-V4.jinja": "dsml",
    "fireworks-ai-llama-3-firefunction-v2.jinja": "firefunction",
    "google-gemma-2-2b-it.jinja": "auto",
    "google-gemma-4-31B-it-interleaved.jinja": "gemma4",
    "google-gemma-4-31B-it.jinja": "gemma4",
    "ibm-granite-granite-3.3-2B-Instruct.jinja": "granite",
    "ibm-granite-granite-4.0.jinja": "hermes-json",
    "ibm-granite-granite-4.1.jinja": "hermes-json",
    "inclusionai-ling-3.0-flash.jinja": "glm",
    "llama-cpp-deepseek-r1.jinja": "deepseek",
    "llama-cpp-rwkv-world.jinja": "auto",
    "llm-jp-llm-jp-4.1-8b-thinking.jinja": "harmony",
    "meetkai-functionary-medium-v3.1.jinja": "functionary-v3.1",
    "meetkai-functionary-medium-v3.2.jinja": "functionary-v3.2",
    "meta-llama-Llama-3.1-8B-Instruct.jinja": "llama3-json",
    "meta-llama-Llama-3.2-3B-Instruct.jinja": "llama3-json",
    "meta-llama-Llama-3.3-70B-Instruct.jinja": "llama3-json",
    "microsoft-Phi-3.5-mini-instruct.jinja": "auto",
    "mistralai-Ministral-3-14B-Reasoning-2512.jinja": "mistral",
    "mistralai-Mistral-Nemo-Instruct-2407.jinja": "mistral",
    "moonshotai-Kimi-K2.jinja": "kimi-k2",
    "muse-glimmer.jinja": "muse-glimmer",
    "openai-gpt-oss-120b.jinja": "harmony",
    "openbmb-MiniCPM5-1B.jinja": "minicpm5",
    "poolside-Laguna-S-2.1.jinja": "glm",
    "poolside-Laguna-XS-2.1.jinja": "glm",
    "poolside-Laguna-XS.2.jinja": "glm",
    "tencent-Hy3.jinja": "hunyuan3",
    "unsloth-Apriel-1.5.jinja": "apriel",
    "unsloth-mistral-Devstral-Small-2507.jinja": "mistral",
    "upstage-Solar-Open-100B.jinja": "solar-open",
}
# Templates where the round trip cannot run, and why (each checked to fail that way).
NO_TOOL_TURNS = {
    "google-gemma-2-2b-it.jinja": "no tool role: it raises unless user and model alternate",
    "llama-cpp-rwkv-world.jinja": "offers no tools and shows no tool results",
    "microsoft-Phi-3.5-mini-instruct.jinja": "offers no tools and shows no tool results",
    "HuggingFaceTB-SmolLM3-3B.jinja": "offers no tools (`xml_tools` only) to check a call against",
}
TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city.",
    "parameters": {"type": "object", "required": ["city"], "properties": {
        "city": {"type": "string", "description": "The city."}}}}}]


def test_the_library_is_what_this_table_covers():
    assert sorted(p.name for p in LIBRARY.glob("*.jinja")) == sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_template_is_detected_as_the_family_its_model_writes(name):
    found = detect((LIBRARY / name).read_text("utf-8"))
    assert found.family == EXPECTED[name], found.marker
    assert not found.unknown  # every library template has a reader now


@pytest.mark.parametrize("name", sorted(set(EXPECTED) - set(NO_TOOL_TURNS)))
def test_an_agents_round_trip_renders_on_each_template(name):
    family = EXPECTED[name]
    writer = (families.get(family) or families.get("hermes-json")).writer
    raw = writer.write(None, "", [ToolCall("call_1", "get_weather", {"city": "Paris"}, 0)])
    res = parse_all_ways(raw, family=family, start="content", tools=TOOLS)
    assert [(c.name, c.arguments) for c in res.tool_calls] == [("get_weather",
                                                                 {"city": "Paris"})]
    call = res.tool_calls[0]
    history = [Message("user", "Weather in Paris?"),
               Message("assistant", "", tool_calls=({"id": call.id, "type": "function",
                                                     "function": {"name": call.name,
                                                                  "arguments": call.arguments}},)),
               Message("tool", '{"temp_c": 21}', tool_call_id=call.id, name=call.name)]
    template = ChatTemplate((LIBRARY / name).read_text("utf-8"), bos_token="<s>",
                            eos_token="</s>", family=family)
    prompt = template.render(history, tools=TOOLS)
    assert "Paris" in prompt and "21" in prompt  # the call and its result are both shown


@pytest.mark.parametrize("name", sorted(NO_TOOL_TURNS))
def test_the_templates_without_tool_turns_really_have_none(name):
    """The exclusions above are what the templates do, not a failure of ours to hide."""
    template = ChatTemplate((LIBRARY / name).read_text("utf-8"), bos_token="<s>",
                            eos_token="</s>")
    history = [Message("user", "Weather in Paris?"),
               Message("assistant", "", tool_calls=({"id": "call_1", "type": "function",
                                                     "function": {"name": "get_weather",
                                                                  "arguments": {}}},)),
               Message("tool", '{"temp_c": 21}', tool_call_id="call_1", name="get_weather")]
    try:
        prompt = template.render(history, tools=TOOLS)
    except Exception:  # Gemma 2 raises on any role but user and model
        return
    assert "get_weather" not in prompt  # neither the tool nor the call is shown
