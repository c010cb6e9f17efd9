"""Tests for the shipped chat templates (resources/templates/*.jinja) as every built-in pack
renders them: a system message in the middle of the conversation (Claude Code's
mid-conversation system message, issue 9 item 1) is rendered where it stands, in the form the
family's format has for a system turn at that point, and nothing before it changes. The
byte-for-byte parity with transformers is tests/engine/chat/test_template.py's golden test (the
`*_mid_system*` cases); this one holds every pack to the rule without a golden per shape."""

from __future__ import annotations

import pytest

from engine.chat.packs import TEMPLATES, PackSpec, builtin_packs
from engine.chat.request import Message
from engine.chat.template import ChatTemplate

PACKS = builtin_packs()
FIRST = "You are terse."
MID = "Mid-conversation note: answer in French from now on."
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Weather for a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}}
CALL = {"id": "call_get_weather_1", "type": "function",
        "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}
# Apriel 1.5's own template (apriel.jinja) begins every system turn with its reasoning prompt.
APRIEL_SYSTEM = (
    "You are a thoughtful and systematic AI assistant built by ServiceNow Language Models (SLAM)"
    " lab. Before providing an answer, analyze the problem carefully and present your reasoning"
    " step by step. After explaining your thought process, provide the final solution in the"
    " following format: [BEGIN FINAL RESPONSE] ... [END FINAL RESPONSE].")
# How each template writes a later system message: its own system/developer turn, or (DeepSeek,
# whose format has none) a delimited user-side note. See each template's header comment.
FORMS = {
    "command_r7b.jinja": "<|START_OF_TURN_TOKEN|><|SYSTEM_TOKEN|><|START_TEXT|>{}<|END_TEXT|>"
                         "<|END_OF_TURN_TOKEN|>",
    "apriel.jinja": "<|system|>\n" + APRIEL_SYSTEM + "{}\n<|end|>\n",
    "chatml.jinja": "<|im_start|>system\n{}<|im_end|>",
    "smollm2.jinja": "<|im_start|>system\n{}<|im_end|>",
    "qwen3_hermes.jinja": "<|im_start|>system\n{}<|im_end|>",
    "qwen3_xml.jinja": "<|im_start|>system\n{}<|im_end|>",
    "gemma3.jinja": "<start_of_turn>system\n{}<end_of_turn>",
    "harmony.jinja": "<|start|>developer<|message|># Instructions\n\n{}\n\n<|end|>",
    "deepseek.jinja": "<｜User｜><system>\n{}\n</system>",
    "dsml.jinja": "<｜User｜><system>\n{}\n</system>",
    "glm.jinja": "<|system|>\n{}",
    "kimi_k2.jinja": "<|im_system|>system<|im_middle|>{}<|im_end|>",
    "minimax_xml.jinja": "]~b]system\n{}[e~[\n",
    "minimax_m3.jinja": "]~b]developer\n{}[e~[\n",
    "kimi_k3.jinja": '<|open|>message role="system"<|sep|>{}<|close|>message<|sep|><|end_of_msg|>',
    "muse_glimmer.jinja": "<|start|>system<|message|>{}<|eot|>",
    "mistral.jinja": "[SYSTEM_PROMPT]{}[/SYSTEM_PROMPT]",
    "gemma4.jinja": "<|turn>system\n{}<turn|>",
    "lfm2.jinja": "<|im_start|>system\n{}<|im_end|>",
    "granite.jinja": "<|start_of_role|>system<|end_of_role|>{}<|end_of_text|>",
    "nemotron_v2.jinja": "<SPECIAL_10>System\n{}\n",
    "seed_oss.jinja": "<seed:bos>system\n{}<seed:eos>",
    "minicpm5.jinja": "<|im_start|>system\n{}<|im_end|>",
    "hunyuan3.jinja": "<｜hy_User:opensource｜><system>\n{}\n</system>",
    "llama3_json.jinja": "<|start_header_id|>system<|end_header_id|>\n\n{}<|eot_id|>",
    "minimax_m1.jinja": "<beginning_of_sentence>system ai_setting=assistant\n{}<end_of_sentence>\n",
    "firefunction.jinja": "<|start_header_id|>system<|end_header_id|>\n\n{}<|eot_id|>",
    "functionary_v3_1.jinja": "<|start_header_id|>system<|end_header_id|>\n\n{}<|eot_id|>",
    "functionary_v3_2.jinja": "<|start_header_id|>system<|end_header_id|>\n\n{}<|eot_id|>",
    "solar_open.jinja": "<|begin|>system<|content|>{}<|end|>",
    "apertus.jinja": "<|system_start|>{}<|system_end|>",
    "gigachat3.jinja": "system<|role_sep|>\n{}<|message_sep|>\n\n",
    "gigachat3_1.jinja": "system<|role_sep|>\n{}<|message_sep|>\n\n",
}


def template(spec: PackSpec) -> ChatTemplate:
    """The pack's template as the service renders it (a pack built from its spec)."""
    return ChatTemplate((TEMPLATES / spec.template).read_text("utf-8"), bos_token=spec.bos_token,
                        eos_token=spec.eos_token, family=spec.family)


def render(spec: PackSpec, messages: list[Message], thinking: bool | None, **kw) -> str:
    return template(spec).render(messages, enable_thinking=thinking, **kw)


def between(prompt: str, before: str, text: str, after: str | None) -> None:
    """`text` appears once, after `before`'s last occurrence and before `after`'s first one
    following it."""
    assert prompt.count(text) == 1, prompt
    at = prompt.index(text)
    assert prompt.rfind(before, 0, at) >= 0, prompt  # the turn before it is rendered before it
    if after is not None:
        assert prompt.find(after, at) > at, prompt  # and the turn after it, after it


def test_every_template_of_a_builtin_pack_is_held_to_a_form():
    assert {s.template for s in PACKS.values()} <= set(FORMS)


@pytest.mark.parametrize("thinking", [None, True, False])
@pytest.mark.parametrize("name", sorted(PACKS))
def test_a_mid_conversation_system_message_renders_where_it_stands(name, thinking):
    spec = PACKS[name]
    chat = [Message("user", "Hello there"), Message("assistant", "Hi, how can I help?"),
            Message("system", MID), Message("user", "Tell me a joke")]
    prompt = render(spec, chat, thinking)
    between(prompt, "Hi, how can I help?", MID, "Tell me a joke")
    assert FORMS[spec.template].format(MID) in prompt, prompt


@pytest.mark.parametrize("name", sorted(PACKS))
def test_the_first_system_message_stays_where_it_was(name):
    """With a first system message too: that one renders exactly as without the later one
    (the prompt up to the turn before the later one is the same bytes), and the later one
    comes after it, where it stands."""
    spec = PACKS[name]
    head = [Message("system", FIRST), Message("user", "Hello there"),
            Message("assistant", "Hi, how can I help?")]
    tail = [Message("user", "Tell me a joke")]
    with_mid = render(spec, [*head, Message("system", MID), *tail], None)
    without = render(spec, [*head, *tail], None)
    cut = without.index("Hi, how can I help?") + len("Hi, how can I help?")
    assert with_mid[:cut] == without[:cut]
    assert with_mid.count(FIRST) == 1 and with_mid.index(FIRST) < with_mid.index("Hello there")
    between(with_mid, "Hi, how can I help?", MID, "Tell me a joke")
    assert FORMS[spec.template].format(MID) in with_mid, with_mid


@pytest.mark.parametrize("name", sorted(PACKS))
def test_a_system_message_after_a_tool_result_ends_the_prompt_before_the_answer(name):
    """After a tool result, with nothing after it but the generation prompt: the note follows
    the result and the prompt still ends where the model answers (the pack's own turn opener
    after it, when the family writes one)."""
    spec = PACKS[name]
    chat = [Message("user", "Weather in Paris?"),
            Message("assistant", "Checking.", tool_calls=(CALL,)),
            Message("tool", "sunny, 21 degrees", tool_call_id=CALL["id"]),
            Message("system", MID)]
    prompt = render(spec, chat, None, tools=[WEATHER])
    if spec.template == "apriel.jinja":
        # Apriel 1.5's own template restates the tool list in every system turn: the note's
        # turn is read without it
        tools = prompt[prompt.rindex("You are provided"):prompt.rindex("</available_tools>")]
        prompt = prompt.replace(MID + "\n" + tools + "</available_tools>", MID)
    between(prompt, "sunny, 21 degrees", MID, None)
    assert FORMS[spec.template].format(MID) in prompt, prompt
    # the model is handed the turn after the note as after a user message: the pack's
    # generation prompt ends the prompt (DSML writes its opener with each user-side turn)
    ask = [Message("user", "Hi")]
    opener = render(spec, ask, None).removeprefix(
        render(spec, ask, None, add_generation_prompt=False))
    if spec.template == "dsml.jinja":
        opener = "<｜Assistant｜><think>"
    closer = FORMS[spec.template].split("{}")[1]
    tail = prompt[prompt.index(MID) + len(MID):]
    assert tail.startswith(closer) and tail.removeprefix(closer).lstrip("\n") == opener, prompt
