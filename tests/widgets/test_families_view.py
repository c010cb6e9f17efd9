"""widgets/channel_view.py, widgets/raw_view.py and widgets/reparse_view.py for every model
family of issue 12 ("The inspector"): a real window plays one output per family (a reasoning
part, an answer and a call, each written in the family's own markup, as in
tests/app/test_families_api.py) and shows each part in its pane, the raw output byte for byte
with every marker of the family in the tag colour, re-parses an `auto` reading with the
family itself, and exports a fixture that reproduces the family's result."""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest

from engine.parse import families
from tests.app.conftest import TOOLS
from tests.widgets.conftest import fixture_result, fragments
from widgets.theme import COLOURS, HELD, STATE, formats

CALL = ("get_weather", {"city": "Paris", "days": 2})
ARGS = '{"city": "Paris", "days": 2}'


@dataclass(frozen=True)
class Family:
    output: str
    start: str  # where the family's prompt leaves the parser (engine/chat/detect.py)
    reasoning: str  # "" for a family without reasoning
    content: str
    markers: tuple[str, ...]  # every marker the output holds: drawn as tags in the raw view


FAMILIES = {
    "harmony": Family(
        "<|channel|>analysis<|message|>Need the weather for Paris.<|end|>"
        "<|start|>assistant<|channel|>commentary<|message|>Checking.<|end|>"
        "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json"
        f"<|message|>{ARGS}<|call|>",
        "content", "Need the weather for Paris.", "Checking.",
        ("<|channel|>", "<|message|>", "<|end|>", "<|start|>", "<|constrain|>", "<|call|>")),
    "deepseek": Family(
        "Need the weather for Paris.\n</think>\n\nChecking.<｜tool▁calls▁begin｜>"
        f"<｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{ARGS}"
        "<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
        "reasoning", "Need the weather for Paris.", "Checking.",
        ("</think>", "<｜tool▁calls▁begin｜>", "<｜tool▁call▁begin｜>", "<｜tool▁sep｜>",
         "<｜tool▁call▁end｜>", "<｜tool▁calls▁end｜>")),
    "dsml": Family(
        "Need the weather for Paris.</think>Checking.\n\n<｜DSML｜function_calls>\n"
        '<｜DSML｜invoke name="get_weather">\n'
        '<｜DSML｜parameter name="city" string="true">Paris</｜DSML｜parameter>\n'
        '<｜DSML｜parameter name="days" string="false">2</｜DSML｜parameter>\n'
        "</｜DSML｜invoke>\n</｜DSML｜function_calls>",
        "reasoning", "Need the weather for Paris.", "Checking.",
        ("</think>", "<｜DSML｜function_calls>", '<｜DSML｜invoke name="', '">',
         '<｜DSML｜parameter name="', '" string="', "</｜DSML｜parameter>",
         "</｜DSML｜invoke>", "</｜DSML｜function_calls>")),
    "glm": Family(
        "<think>Need the weather for Paris.</think>\nChecking.\n<tool_call>get_weather\n"
        "<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n"
        "<arg_key>days</arg_key>\n<arg_value>2</arg_value>\n</tool_call>",
        "content", "Need the weather for Paris.", "Checking.",
        ("<think>", "</think>", "<tool_call>", "<arg_key>", "</arg_key>", "<arg_value>",
         "</arg_value>", "</tool_call>")),
    "kimi-k2": Family(
        "<think>Need the weather for Paris.</think>Checking.<|tool_calls_section_begin|>"
        f"<|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>{ARGS}"
        "<|tool_call_end|><|tool_calls_section_end|>",
        "content", "Need the weather for Paris.", "Checking.",
        ("<think>", "</think>", "<|tool_calls_section_begin|>", "<|tool_call_begin|>",
         "<|tool_call_argument_begin|>", "<|tool_call_end|>", "<|tool_calls_section_end|>")),
    "minimax-xml": Family(
        "Need the weather for Paris.\n</think>\n\nChecking.\n<minimax:tool_call>\n"
        '<invoke name="get_weather">\n<parameter name="city">Paris</parameter>\n'
        '<parameter name="days">2</parameter>\n</invoke>\n</minimax:tool_call>',
        "reasoning", "Need the weather for Paris.", "Checking.",
        ("</think>", "<minimax:tool_call>", '<invoke name="', '">', '<parameter name="',
         "</parameter>", "</invoke>", "</minimax:tool_call>")),
    "minimax-m3": Family(
        "Need the weather for Paris.</mm:think>Checking.]<]minimax[>[<tool_call>\n"
        ']<]minimax[>[<invoke name="get_weather">]<]minimax[>[<city>Paris]<]minimax[>[</city>'
        "]<]minimax[>[<days>2]<]minimax[>[</days>]<]minimax[>[</invoke>\n]<]minimax[>[</tool_call>",
        "reasoning", "Need the weather for Paris.", "Checking.",
        ("</mm:think>", "]<]minimax[>[", "<tool_call>", '<invoke name="', "<city>", "</city>",
         "</invoke>", "</tool_call>")),
    "kimi-k3": Family(
        "Need the weather for Paris.<|close|>think<|sep|><|open|>response<|sep|>Checking."
        '<|close|>response<|sep|><|open|>tools<|sep|><|open|>call tool="get_weather" index="1"'
        '<|sep|><|open|>argument key="city" type="string"<|sep|>Paris<|close|>argument<|sep|>'
        '<|open|>argument key="days" type="number"<|sep|>2<|close|>argument<|sep|>'
        "<|close|>call<|sep|><|close|>tools<|sep|><|close|>message<|sep|>",
        "reasoning", "Need the weather for Paris.", "Checking.",
        ("<|close|>think<|sep|>", "<|open|>response<|sep|>", "<|close|>response<|sep|>",
         "<|open|>tools<|sep|>", '<|open|>call tool="', '<|open|>argument key="', '" type="',
         "<|close|>argument<|sep|>", "<|close|>call<|sep|>", "<|close|>tools<|sep|>",
         "<|close|>message<|sep|>")),
    "muse-glimmer": Family(
        " to=self<|message|>Need the weather for Paris.<|eom|><|start|>assistant to=user"
        "<|message|>Checking.<|eom|><|start|>assistant to=get_weather<|message|>"
        '<atem:function_calls>\n<atem:invoke name="get_weather">\n'
        '<atem:parameter name="city">Paris</atem:parameter>\n'
        '<atem:parameter name="days">2</atem:parameter>\n</atem:invoke>\n</atem:function_calls>',
        "content", "Need the weather for Paris.", "Checking.",
        ("to=self<|message|>", "<|eom|>", "<|start|>assistant", "to=user<|message|>",
         "<|message|>", "<atem:function_calls>", '<atem:invoke name="', '<atem:parameter name="',
         "</atem:parameter>", "</atem:invoke>", "</atem:function_calls>")),
    "mistral": Family(
        f"[THINK]Need the weather for Paris.[/THINK]Checking.[TOOL_CALLS]get_weather[ARGS]{ARGS}",
        "content", "Need the weather for Paris.", "Checking.",
        ("[THINK]", "[/THINK]", "[TOOL_CALLS]", "[ARGS]")),
    "gemma4": Family(
        "<|channel>thought\nNeed the weather for Paris.<channel|>Checking."
        '<|tool_call>call:get_weather{city:<|"|>Paris<|"|>,days:2}<tool_call|>',
        "content", "Need the weather for Paris.", "Checking.",
        ("<|channel>", "<channel|>", "<|tool_call>", '<|"|>', "<tool_call|>")),
    "llama3-json": Family(
        'Checking.\n<|python_tag|>{"name": "get_weather", "parameters": ' + ARGS + "}",
        "content", "", "Checking.", ("<|python_tag|>",)),
    "minimax-m1": Family(
        "<think>\nNeed the weather for Paris.\n</think>\n\nChecking.\n<tool_calls>\n"
        '{"name": "get_weather", "arguments": ' + ARGS + "}\n</tool_calls>",
        "content", "Need the weather for Paris.", "Checking.",
        ("<think>", "</think>", "<tool_calls>", "</tool_calls>")),
    "firefunction": Family(
        'Checking. functools[{"name": "get_weather", "arguments": ' + ARGS + "}]",
        "content", "", "Checking.", (" functools[",)),
    "functionary-v3.1": Family(
        "Checking.<function=get_weather>" + ARGS + "</function>",
        "content", "", "Checking.", ("<function=", "</function>")),
    # the prompt ended with `>>>`: the reply opens with its recipient, `all` for the answer
    "functionary-v3.2": Family(
        "all\nChecking.>>>get_weather\n" + ARGS,
        "content", "", "Checking.", (">>>",)),
    # `<function=` off a line start: read as `auto`, a bare `<function=` at one is a Qwen call
    "seed-oss": Family(
        "<seed:think>Need the weather for Paris.</seed:think>\nChecking.\n"
        "<seed:tool_call><function=get_weather>\n<parameter=city>Paris</parameter>\n"
        "<parameter=days>2</parameter>\n</function>\n</seed:tool_call>",
        "content", "Need the weather for Paris.", "Checking.",
        ("<seed:think>", "</seed:think>", "<seed:tool_call>", "<function=", "<parameter=",
         "</parameter>", "</function>", "</seed:tool_call>")),
    "minicpm5": Family(
        "Need the weather for Paris.\n</think>\n\nChecking.\n"
        '<function name="get_weather"><param name="city">Paris</param>'
        '<param name="days">2</param></function>',
        "reasoning", "Need the weather for Paris.", "Checking.",
        ("</think>", "<function", ' name="', '">', "<param", "</param>", "</function>")),
    "hunyuan3": Family(
        "Need the weather for Paris.</think:opensource>Checking.<tool_calls:opensource>\n"
        "<tool_call:opensource>get_weather<tool_sep:opensource>\n"
        "<arg_key:opensource>city</arg_key:opensource>\n"
        "<arg_value:opensource>Paris</arg_value:opensource>\n"
        "<arg_key:opensource>days</arg_key:opensource>\n"
        "<arg_value:opensource>2</arg_value:opensource>\n"
        "</tool_call:opensource>\n</tool_calls:opensource>",
        "reasoning", "Need the weather for Paris.", "Checking.",
        ("</think:opensource>", "<tool_calls:opensource>", "<tool_call:opensource>",
         "<tool_sep:opensource>", "<arg_key:opensource>", "</arg_key:opensource>",
         "<arg_value:opensource>", "</arg_value:opensource>", "</tool_call:opensource>",
         "</tool_calls:opensource>")),
    "lfm2": Family(
        "<think>Need the weather for Paris.</think>Checking.<|tool_call_start|>"
        '[get_weather(city="Paris", days=2)]<|tool_call_end|>',
        "content", "Need the weather for Paris.", "Checking.",
        ("<think>", "</think>", "<|tool_call_start|>", "<|tool_call_end|>")),
    "granite": Family(
        "<think>Need the weather for Paris.</think><response>Checking.</response>"
        '<|tool_call|>[{"name": "get_weather", "arguments": ' + ARGS + "}]",
        "content", "Need the weather for Paris.", "Checking.",
        ("<think>", "</think>", "<response>", "</response>", "<|tool_call|>")),
    "nemotron-v2": Family(
        "Need the weather for Paris.\n</think>\nChecking.\n"
        '<TOOLCALL>[{"name": "get_weather", "arguments": ' + ARGS + "}]</TOOLCALL>",
        "reasoning", "Need the weather for Paris.", "Checking.",
        ("</think>", "<TOOLCALL>", "</TOOLCALL>")),
}


FAMILIES.update({
    "solar-open": Family(
        "<|think|>Need the weather for Paris.<|end|><|begin|>assistant<|content|>Checking.<|end|>"
        "<|begin|>assistant<|tool_calls|><|tool_call:begin|>a1b2c3d4e5<|tool_call:name|>"
        f"get_weather<|tool_call:args|>{ARGS}<|tool_call:end|>",
        "content", "Need the weather for Paris.", "Checking.",
        ("<|think|>", "<|end|>", "<|begin|>assistant", "<|content|>", "<|tool_calls|>",
         "<|tool_call:begin|>", "<|tool_call:name|>", "<|tool_call:args|>", "<|tool_call:end|>")),
    "apertus": Family(
        "<|inner_prefix|>Need the weather for Paris.<|inner_suffix|>Checking.<|tools_prefix|>"
        f'[{{"get_weather": {ARGS}}}]<|tools_suffix|>',
        "content", "Need the weather for Paris.", "Checking.",
        ("<|inner_prefix|>", "<|inner_suffix|>", "<|tools_prefix|>", "<|tools_suffix|>")),
    "gigachat3": Family(
        "Checking.<|message_sep|>\n\nfunction call<|role_sep|>\n"
        f'{{"name": "get_weather", "arguments": {ARGS}}}',
        "content", "", "Checking.", ("<|message_sep|>", "<|role_sep|>")),
    "gigachat3.1": Family(
        f'Checking.<|function_call|>{{"name": "get_weather", "arguments": {ARGS}}}',
        "content", "", "Checking.", ("<|function_call|>",)),
})


FAMILIES.update({
    "command-r7b": Family(
        "<|START_THINKING|>Need the weather for Paris.<|END_THINKING|><|START_RESPONSE|>Checking."
        '<|END_RESPONSE|><|START_ACTION|>[\n    {"tool_call_id": "0", "tool_name": "get_weather", '
        f'"parameters": {ARGS}}}\n]<|END_ACTION|>',
        "content", "Need the weather for Paris.", "Checking.",
        ("<|START_THINKING|>", "<|END_THINKING|>", "<|START_RESPONSE|>", "<|END_RESPONSE|>",
         "<|START_ACTION|>", "<|END_ACTION|>")),
    "command-r-plus": Family(
        'Checking.\nAction:\n```json\n[\n    {\n        "tool_name": "get_weather",\n'
        f'        "parameters": {ARGS}\n    }}\n]```',
        "content", "", "Checking.", ("Action:", "```json", "```")),
    "apriel": Family(
        "Here are my reasoning steps:\nNeed the weather for Paris.\n[BEGIN FINAL RESPONSE]\n"
        f'Checking.\n<tool_calls>[{{"name": "get_weather", "arguments": {ARGS}}}]</tool_calls>',
        "content", "Need the weather for Paris.", "Checking.",
        ("Here are my reasoning steps:", "[BEGIN FINAL RESPONSE]", "<tool_calls>",
         "</tool_calls>")),
    # Formats no family marker names (chosen with --family; engine/parse/shapes/): a bare
    # Python-call list, the same in Llama 4's python tags, a bare JSON call list.
    "pythonic": Family(
        'Checking.\n[get_weather(city="Paris", days=2)]', "content", "", "Checking.", ()),
    "pythonic-tagged": Family(
        'Checking.<|python_start|>[get_weather(city="Paris", days=2)]<|python_end|>',
        "content", "", "Checking.", ("<|python_start|>", "<|python_end|>")),
    "json-list": Family(
        f'Checking.\n[{{"name": "get_weather", "arguments": {ARGS}}}]',
        "content", "", "Checking.", ()),
})


def test_every_family_has_a_case():
    assert set(FAMILIES) == set(families.NAMES) - {"auto", "qwen-xml", "hermes-json"}


def play(window, tmp_path, family: str, read_as: str | None = None, stepwise: bool = False):
    """Play the family's output as a text file read as `read_as` (the family's own by
    default); returns its track, selected. Stepwise: one token per frame, so the views draw
    the events as they come (a tag split over two frames)."""
    fam = FAMILIES[family]
    path = tmp_path / f"{family}.txt"
    path.write_text(fam.output, encoding="utf-8")
    pb = window.playback
    pb.set_speed(0.0)
    track = pb.open(path, play=False)[0].track
    track.family = read_as or family
    track.start_state = track.state = fam.start
    track.tools = tuple(TOOLS)  # schema typing: GLM's and DSML's "2" is the integer 2
    if stepwise:
        window.frame()
        while not pb.finished:
            pb.step()
            window.frame()
    else:
        pb.play()
        window.frame()
    window.frame()
    assert track.status == "done"
    window.log.select(track)
    return track


def occurrences(text: str, needle: str) -> list[int]:
    out, i = [], text.find(needle)
    while i >= 0:
        out.append(i)
        i = text.find(needle, i + 1)
    return out


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_panes_show_each_part_of_the_family_output(window, tmp_path, family):
    fam = FAMILIES[family]
    track = play(window, tmp_path, family)
    result = track.result
    assert (result.reasoning.strip(), result.content.strip()) == (fam.reasoning, fam.content)
    assert [(c.name, c.arguments) for c in result.tool_calls] == [CALL]
    channels = window.channels
    reasoning, content = channels.text("reasoning"), channels.text("content")
    assert reasoning.strip() == fam.reasoning and content.strip() == fam.content
    tools = channels.panes["call"].toPlainText()
    assert f"▸ {CALL[0]}" in tools and json.dumps(CALL[1], indent=2) in tools
    for marker in fam.markers:  # no markup leaks into the reading
        assert marker not in reasoning + content + tools, marker
    for name, state in (("reasoning", "reasoning"), ("content", "content")):
        states = {f.property(STATE) for t, f in fragments(channels.panes[name]) if t.strip()}
        assert states <= {state}, (name, states)


@pytest.mark.parametrize("stepwise", [False, True], ids=["whole", "stepwise"])
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_raw_view_draws_the_family_markers_as_tags(window, tmp_path, family, stepwise):
    fam = FAMILIES[family]
    track = play(window, tmp_path, family, stepwise=stepwise)
    raw = window.raw
    assert raw.text() == track.raw == fam.output  # byte for byte
    tag = formats().state("markup")
    for marker in fam.markers:
        found = occurrences(fam.output, marker)
        assert found, marker
        for at in found:
            for pos in range(at, at + len(marker)):
                fmt = raw.raw.format_at(pos)
                assert fmt.property(STATE) == "markup", (marker, pos, fmt.property(STATE))
                assert fmt.foreground().color() == tag.foreground().color()
                assert fmt.foreground().color().name() == COLOURS["markup"]
                assert not fmt.property(HELD)
    # The reading's own text keeps its state's colour: the reasoning, the answer, and the
    # call's name and value (their last occurrences: the reasoning names Paris too).
    for text, state in ((fam.reasoning, "reasoning"), (fam.content, "content"),
                        (CALL[0], "call"), ("Paris", "call")):
        if not text:
            continue
        at = fam.output.rindex(text) if state == "call" else fam.output.index(text)
        for pos in range(at, at + len(text)):
            fmt = raw.raw.format_at(pos)
            assert fmt.property(STATE) == state, (text, pos, fmt.property(STATE))
            assert fmt.foreground().color().name() == COLOURS[state]


def test_the_family_choice_lists_every_family(window):
    view = window.reparse
    choices = [view.family.itemText(i) for i in range(view.family.count())]
    assert choices == list(families.NAMES)
    assert set(FAMILIES) | {"auto"} <= set(choices)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_reparse_with_the_family_reads_the_call(window, tmp_path, family):
    fam = FAMILIES[family]
    track = play(window, tmp_path, family, read_as="auto")
    assert not track.result.tool_calls
    view = window.reparse
    assert view.track is track and view.family.currentText() == "auto"
    view.family.setCurrentText(family)
    lines = view.reparse()
    assert f"+{CALL[0]}:" in lines
    assert "calls 0 → 1" in view.summary.text()
    assert "finish stop → tool_calls" in view.summary.text()
    # Read as auto, the family's markup was text; read as the family, it comes out (a
    # format with no markers: the call's own text).
    removed = "\n".join(line for line in lines if line.startswith("-"))
    assert any(m in removed for m in fam.markers or (f"{CALL[0]}",)), removed
    added = "\n".join(line for line in lines if line.startswith("+"))
    assert not any(m in added for m in fam.markers), added
    assert f"+{CALL[0]}:" in view.out.toPlainText()


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_export_fixture_reproduces_the_family_result(window, tmp_path, family):
    track = play(window, tmp_path, family)
    data = json.loads(window.reparse.export(tmp_path / "fixture.json").read_text("utf-8"))
    assert data["raw"] == track.raw == "".join(data["chunks"]) == FAMILIES[family].output
    settings = data["parser"]
    assert settings["family"] == family and settings["start"] == FAMILIES[family].start
    assert fixture_result(data) == data["expected"]
    assert [(c["name"], c["arguments"]) for c in data["expected"]["tool_calls"]] == [CALL]
    assert data["expected"]["finish_reason"] == "tool_calls"
    assert data["expected"]["content"].strip() == FAMILIES[family].content
