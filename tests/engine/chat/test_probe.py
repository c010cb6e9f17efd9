"""The template probe (engine/chat/probe.py, engine/chat/probe_check.py): over the 71 templates of
llama.cpp's library, the derived record reads each family's own output as the family does
(cross-checked against the hand-written families) or says why there is none; and on templates
of our own that no family names, detection goes by the call syntax the template renders (a
Llama 3 header over a Python list is `pythonic`), end to end: detection, render, parse whole and
streamed."""

from __future__ import annotations

import pytest

from engine.chat.detect import by_markers, detect, format_label
from engine.chat.packs import pack_from_template
from engine.chat.probe import NO_CALLS, probe
from engine.chat.probe_check import derived_family, reads, verdict
from engine.chat.request import Message
from engine.chat.template import ChatTemplate
from engine.parse import families
from engine.parse.events import ToolCall
from tests.engine.chat.test_template_library import EXPECTED
from tests.engine.parse.parser_harness import parse_all_ways
from tests.support import LIBRARY

TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city.",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string"}, "days": {"type": "integer"}}}}},
    {"type": "function", "function": {
        "name": "get_time", "description": "The time.",
        "parameters": {"type": "object", "properties": {"tz": {"type": "string"}}}}}]
CALLS = [ToolCall("c1", "get_weather", {"city": "Paris", "days": 2}, 0),
         ToolCall("c2", "get_time", {"tz": "UTC"}, 1)]
WANT = [("get_weather", {"city": "Paris", "days": 2}), ("get_time", {"tz": "UTC"})]


def _cross_check(name: str) -> str:
    """'agrees', 'disagrees', 'no calls' or 'unknown' for one library template."""
    v = verdict((LIBRARY / name).read_text("utf-8"), by_markers(
        (LIBRARY / name).read_text("utf-8")).family)
    if v.probe.no_calls:
        return "no calls"
    if v.probe.format is None or not v.passed:
        return "unknown"
    fam = families.get(EXPECTED[name])
    own = derived_family(v.probe.format, v.probe.reasoning)
    for calls in (CALLS[:1], CALLS):
        raw = fam.writer.write_calls(calls)
        want = tuple((c.name, c.arguments) for c in calls)
        if reads(fam.name, raw, want) or reads(own.name, raw, want):
            return "disagrees"
    return "agrees"


@pytest.mark.skipif(not LIBRARY.is_dir(), reason="needs ../shared/templates")
def test_the_probe_over_the_library_agrees_with_the_families_or_says_why_not(capsys):
    counts: dict[str, list[str]] = {"agrees": [], "disagrees": [], "no calls": [],
                                    "unknown": []}
    for name in sorted(EXPECTED):
        counts[_cross_check(name)].append(name)
    with capsys.disabled():
        print("\nprobe over the library: " + ", ".join(f"{k} {len(v)}"
                                                       for k, v in counts.items()))
        for name in counts["unknown"]:
            why = verdict((LIBRARY / name).read_text("utf-8")).why_unknown()
            print(f"  unknown: {name}: {why}")
    # A disagreement is the family writing a newer syntax than the template shows (Mistral
    # Nemo's template renders the old JSON list, the family writes `NAME[ARGS]{…}`; DeepSeek
    # R1's templates render `function<｜tool▁sep｜>NAME` and a fence, the family writes V3.1's
    # layout; gpt-oss's template writes the recipient in the role header,
    # `<|start|>assistant to=functions.NAME<|channel|>commentary json<|message|>`, where the
    # model and the family write it after the channel; Llama 3.1-3.3's templates render one
    # bare object a turn, calls on lines of their own, the family writes them joined by `; `;
    # DeepSeek V4's templates render DSML's
    # `tool_calls` section, the family writes V3.2's `function_calls`): the family reads both,
    # so it is the family that is used, never the derived record.
    for name in counts["disagrees"]:
        v = verdict((LIBRARY / name).read_text("utf-8"), EXPECTED[name])
        assert v.agrees and v.family.name == EXPECTED[name], name
    assert len(counts["disagrees"]) <= 10, counts["disagrees"]
    assert len(counts["agrees"]) >= 46
    # Every template that renders no call says so, and those are the ones without tool turns
    # (DeepSeek R1 Distill Llama's shows calls only for a turn whose content is None: the
    # template gets that null, as from an OpenAI client, and its calls are derived).
    assert "deepseek-ai-DeepSeek-R1-Distill-Llama-8B.jinja" not in counts["no calls"]
    for name in counts["no calls"]:
        assert probe((LIBRARY / name).read_text("utf-8")).why == NO_CALLS
    for name in counts["unknown"]:
        assert verdict((LIBRARY / name).read_text("utf-8")).why_unknown()


# Templates that refused the probe's first conversations and are probed with what real clients
# send: Ministral refuses an assistant turn with neither content nor calls (the probe goes on
# without that render); Command R+ reads every property's description and the required list.
FALLBACKS = {
    "mistralai-Ministral-3-14B-Reasoning-2512.jinja": "[TOOL_CALLS]",
    "CohereForAI-c4ai-command-r-plus-tool_use.jinja": "Action:\n```json\n",
}


@pytest.mark.skipif(not LIBRARY.is_dir(), reason="needs ../shared/templates")
@pytest.mark.parametrize("name", sorted(FALLBACKS))
def test_templates_that_refuse_the_plain_probe_derive_a_record_that_reads_their_family(name):
    found = probe((LIBRARY / name).read_text("utf-8"))
    assert found.format is not None, found.why
    assert FALLBACKS[name] in found.format.section + found.format.call
    assert _cross_check(name) == "agrees"


@pytest.mark.skipif(not LIBRARY.is_dir(), reason="needs ../shared/templates")
def test_reasoning_written_only_before_calls_is_reasoning_and_a_closing_action_tag_is_kept():
    # Command R7B writes `<|START_THINKING|>PLAN<|END_THINKING|>` before its calls only (an
    # empty pair when there is no plan) and closes them with `<|END_ACTION|>`, where an answer
    # ends `<|END_RESPONSE|>`: alike only in `|>`, so the tag is the call text's own. Its thinking
    # switch is no `<|CHATBOT_TOKEN|>` pair.
    name = "CohereForAI-c4ai-command-r7b-12-2024-tool_use.jinja"
    found = probe((LIBRARY / name).read_text("utf-8"))
    assert found.reasoning == ("<|START_THINKING|>", "<|END_THINKING|>")
    assert found.format is not None
    assert (found.format.section, found.format.section_end) == ("<|START_ACTION|>",
                                                                "<|END_ACTION|>")
    assert all(t.startswith("<|START_ACTION|>[") for _, _, t in found.calls)
    # Each call object starts with the model's own `tool_call_id` (the call's position): the
    # record's id key, read and never required; the record reads what the family writes.
    assert (found.format.id_key, found.format.name_key, found.format.args_key) == (
        "tool_call_id", "tool_name", "parameters")
    assert verdict((LIBRARY / name).read_text("utf-8")).passed
    assert _cross_check(name) == "agrees"


@pytest.mark.skipif(not LIBRARY.is_dir(), reason="needs ../shared/templates")
def test_a_section_of_bare_call_objects_is_derived_and_read():
    # MiniMax-M1 writes `<tool_calls>\n{…}\n{…}\n</tool_calls>`: the json-object shape's
    # section reader (the next `{` a call of its own) reads it, as the family does with it.
    found = probe((LIBRARY / "MiniMax-M1.jinja").read_text("utf-8"))
    assert found.format is not None, found.why
    assert (found.format.section.strip(), found.format.call) == ("<tool_calls>", "")
    assert verdict((LIBRARY / "MiniMax-M1.jinja").read_text("utf-8")).passed
    assert _cross_check("MiniMax-M1.jinja") == "agrees"


@pytest.mark.skipif(not LIBRARY.is_dir(), reason="needs ../shared/templates")
def test_a_list_of_objects_keyed_by_the_call_name_is_derived():
    # Apertus writes `[{"NAME": ARGS}, …]` in `<|tools_prefix|>…<|tools_suffix|>`.
    found = probe((LIBRARY / "Apertus-8B-Instruct.jinja").read_text("utf-8"))
    assert found.format is not None and found.format.keyed, found.why
    assert (found.format.section, found.format.section_end) == ("<|tools_prefix|>",
                                                                "<|tools_suffix|>")
    assert _cross_check("Apertus-8B-Instruct.jinja") == "agrees"


@pytest.mark.skipif(not LIBRARY.is_dir(), reason="needs ../shared/templates")
@pytest.mark.parametrize("name", ["GigaChat3-10B-A1.8B.jinja", "GigaChat3.1-10B-A1.8B.jinja"])
def test_a_template_that_renders_the_first_call_only_derives_from_the_one_call_renders(name):
    # GigaChat 3 writes `tool_calls[0]`: two calls render as the first alone, which is no
    # two calls to read back; the one-call renders are self-tested, and the record reads the
    # family's own one and two calls.
    found = probe((LIBRARY / name).read_text("utf-8"))
    assert found.format is not None, found.why
    assert found.calls[2][2] == "" and "the first call only" in found.renders[4].text
    # GigaChat 3 opens a call with `function call<|role_sep|>`, 3.1 with `<|function_call|>`.
    assert found.format.call.rstrip().endswith(("function call<|role_sep|>", "<|function_call|>"))
    assert verdict((LIBRARY / name).read_text("utf-8")).passed
    assert _cross_check(name) == "agrees"


@pytest.mark.skipif(not LIBRARY.is_dir(), reason="needs ../shared/templates")
def test_a_key_tag_that_says_whether_the_value_is_a_string_is_the_string_attribute():
    # DSML writes ` string="true"` in a string's key tag and `"false"` in a number's.
    name = "deepseek-ai-DeepSeek-V3.2.jinja"
    found = probe((LIBRARY / name).read_text("utf-8"))
    assert found.format is not None and found.format.string_attr
    assert found.format.key_end == '">'
    assert verdict((LIBRARY / name).read_text("utf-8")).passed
    assert _cross_check(name) == "agrees"


@pytest.mark.skipif(not LIBRARY.is_dir(), reason="needs ../shared/templates")
def test_calls_one_a_line_in_a_section_have_no_whitespace_call_tag():
    # MiniMax M1 writes `<tool_calls>\n`, a JSON object a line, `\n</tool_calls>`: the line
    # breaks are the section's and the separator, no call's opener; the record is the family's.
    found = probe((LIBRARY / "MiniMax-M1.jinja").read_text("utf-8"))
    assert found.format == families.get("minimax-m1").format


@pytest.mark.skipif(not LIBRARY.is_dir(), reason="needs ../shared/templates")
def test_a_call_end_never_stops_inside_a_tag_the_separator_opens_alike():
    # llm-jp 4.1 ends the last call `<|call|>` and the others `<|end|>`, then a new assistant
    # header: alike only in `<|`, which is neither's call end.
    name = "llm-jp-llm-jp-4.1-8b-thinking.jinja"
    fmt = probe((LIBRARY / name).read_text("utf-8")).format
    assert fmt is not None
    assert (fmt.call_end, fmt.sep, fmt.section_end) == ("", "<|end|><|start|>assistant ",
                                                        "<|call|>")


@pytest.mark.skipif(not LIBRARY.is_dir(), reason="needs ../shared/templates")
def test_tags_that_change_with_the_value_type_are_no_record():
    # Kimi K3 writes `type="string"` or `type="integer"` in a key's tag and the call's position
    # after its name: no record field writes either, so no record is derived, and why says so.
    found = probe((LIBRARY / "Kimi-K3.jinja").read_text("utf-8"))
    assert found.format is None and "differs with its value's type" in found.why


# --- templates no family names ---------------------------------------------------------------

_SYSTEM = ("{%- if tools %}{{ header('system') }}Tools: {{ tools | tojson }}{{ eot }}"
           "{%- endif %}")
_PY_CALLS = ("[{%- for tc in m.tool_calls %}{{ tc.function.name }}("
             "{%- for k, v in tc.function.arguments.items() %}{{ k }}={{ v | tojson }}"
             "{%- if not loop.last %}, {% endif %}{%- endfor %})"
             "{%- if not loop.last %}, {% endif %}{%- endfor %}]")
_JSON_LIST = ("[{%- for tc in m.tool_calls %}{\"name\": {{ tc.function.name | tojson }}, "
              "\"arguments\": {{ tc.function.arguments | tojson }}}"
              "{%- if not loop.last %}, {% endif %}{%- endfor %}]")
_JSON_ONE = ("{%- for tc in m.tool_calls %}{\"name\": {{ tc.function.name | tojson }}, "
             "\"parameters\": {{ tc.function.arguments | tojson }}}"
             "{%- if not loop.last %}; {% endif %}{%- endfor %}")


def _template(head: str, tail: str, eot: str, calls: str) -> str:
    return ("{%- macro header(role) %}" + head + "{{ role }}" + tail + "{% endmacro %}"
            "{%- set eot = '" + eot + "' %}" + _SYSTEM +
            "{%- for m in messages %}{{ header(m.role) }}"
            "{%- if m.tool_calls %}" + calls + "{%- else %}{{ m.content }}{%- endif %}"
            "{{ eot }}{%- endfor %}"
            "{%- if add_generation_prompt %}{{ header('assistant') }}{%- endif %}")


LLAMA3 = ("<|start_header_id|>", "<|end_header_id|>\n\n", "<|eot_id|>")
LLAMA4 = ("<|header_start|>", "<|header_end|>\n\n", "<|eot|>")
CHATML = ("<|im_start|>", "\n", "<|im_end|>\n")
HELD_OUT = {
    # name: (template, family, the model's reply)
    "llama3 header, python list": (
        _template(*LLAMA3, _PY_CALLS), "pythonic",
        '[get_weather(city="Paris", days=2), get_time(tz="UTC")]'),
    "llama4, python_start": (
        _template(*LLAMA4, "<|python_start|>" + _PY_CALLS + "<|python_end|>"),
        "pythonic-tagged",
        '<|python_start|>[get_weather(city="Paris", days=2), get_time(tz="UTC")]'
        '<|python_end|>'),
    "chatml, bare json list": (
        _template(*CHATML, _JSON_LIST), "json-list",
        '[{"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}, '
        '{"name": "get_time", "arguments": {"tz": "UTC"}}]'),
    "llama4, llama 3 json": (
        _template(*LLAMA4, _JSON_ONE), "llama3-json",
        '{"name": "get_weather", "parameters": {"city": "Paris", "days": 2}}; '
        '{"name": "get_time", "parameters": {"tz": "UTC"}}'),
}


@pytest.mark.parametrize("case", sorted(HELD_OUT))
def test_held_out_templates_are_read_by_the_calls_they_render(case):
    template, family, reply = HELD_OUT[case]
    found = detect(template)
    assert found.family == family and not found.unknown, found.describe()
    assert found.verdict.family is not None and found.verdict.family.name == family
    # Rendered with a call in the history, the call shows in the template's own syntax.
    call = {"id": "c1", "type": "function",
            "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}
    history = [Message("user", "Weather?"), Message("assistant", "", tool_calls=(call,)),
               Message("tool", "21C", tool_call_id="c1", name="get_weather")]
    prompt = ChatTemplate(template, family=found.family).render(history, tools=TOOLS)
    assert "get_weather" in prompt and "Paris" in prompt and "21C" in prompt
    res = parse_all_ways(reply, family=found.family, start="content", tools=TOOLS)
    assert [(c.name, c.arguments) for c in res.tool_calls] == WANT
    assert not res.content.strip()


def test_a_llama3_header_over_python_calls_is_pythonic_and_the_start_line_says_why():
    template = HELD_OUT["llama3 header, python list"][0]
    assert by_markers(template).family == "llama3-json"  # what the header alone said
    pack = pack_from_template("held-out", template, "test")
    assert pack.family == "pythonic"
    assert "markers name llama3-json" in pack.family_origin
    assert "python list (bare)" in pack.family_origin


def test_a_format_no_family_writes_is_derived_and_read_whole_and_streamed():
    calls = ("<calls>" + _JSON_LIST + "</calls>")
    template = _template(*CHATML, calls)
    pack = pack_from_template("derived", template, "test")
    assert pack.family.startswith("derived:json-list"), pack.family_origin
    assert pack.family_origin == "format: derived from the template (json list in <calls>)"
    assert format_label(pack.family) == "derived from the template (json list in <calls>)"
    reply = ('Checking.\n<calls>[{"name": "get_weather", "arguments": {"city": "Paris", '
             '"days": 2}}, {"name": "get_time", "arguments": {"tz": "UTC"}}]</calls>')
    res = parse_all_ways(reply, family=pack.family, start="content", tools=TOOLS)
    assert [(c.name, c.arguments) for c in res.tool_calls] == WANT
    assert res.content.strip() == "Checking."
    # The derived family writes the same syntax back (history and forced calls use it).
    assert families.get(pack.family).writer.write_calls(CALLS).startswith('<calls>[{"name"')


def test_calls_that_do_not_read_back_are_format_unknown_with_why():
    # Name in a tag, arguments as `key: value` lines: no record reads that back exactly.
    calls = ("{%- for tc in m.tool_calls %}<call {{ tc.function.name }}>"
             "{%- for k, v in tc.function.arguments.items() %}{{ k }}: {{ v }};"
             "{%- endfor %}</call>{%- endfor %}")
    found = detect(_template(*CHATML, calls))
    assert found.unknown and found.family == "auto"
    assert found.describe().startswith("format unknown")
    assert found.verdict.why_unknown()


def test_a_template_without_tool_turns_says_it_renders_no_calls():
    plain = _template(*CHATML, "{{ m.content }}").replace(_SYSTEM, "")
    assert probe(plain).why == NO_CALLS
    assert detect(plain).family == "auto" and not detect(plain).unknown
