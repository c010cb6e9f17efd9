"""engine/chat/detect.py (detection from a template, the start state per family, the tokens kept
as text), its use by engine/chat/packs.py on synthetic GGUFs and `--family`, and the engine
rendering exactly the preserved special tokens on the real default model (SmolLM2, whose
`<|im_start|>` and `<|im_end|>` are special tokens; token-reference grammars make it emit
them)."""

from __future__ import annotations

import dataclasses
import json
import threading
from pathlib import Path

import pytest

from engine.backends.base import Finish, Job, Token
from engine.chat.detect import (
    detect,
    preserved_tokens,
    repair_message,
    start_state,
)
from engine.chat.packs import TEMPLATES, builtin_packs, pack_from_dir, pack_from_gguf, resolve_pack
from engine.chat.request import Message, Sampling
from engine.chat.template import ChatTemplate, repair_history
from engine.parse import families
from engine.parse.families import registry
from tests.engine.chat.test_packs import write_gguf

# The families with a pack of their own (the `<tool_call>` families are detected last).
FAMILIES = tuple(f for f in families.REGISTRY.values() if not f.fallback)
BY_FAMILY = {f.name: f for f in FAMILIES}

# One line from each family's real chat template (the markers detection must read), with the
# family it names. The DeepSeek V3.2 line also mentions V3's call marker, GLM's writes
# <tool_call>, Harmony's Gemma-like `<|channel`: the registry's order decides them.
REAL_SNIPPETS = {
    "harmony": "{{- '<|start|>assistant<|channel|>analysis<|message|>' + message.thinking }}",
    "dsml": "{{ '<｜DSML｜function_calls>' }}{# not <｜tool▁calls▁begin｜> #}",
    "deepseek": "{{'<｜Assistant｜>'}}{{'<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>'}}",
    "kimi-k2": "<|im_assistant|>assistant<|im_middle|>{{ '<|tool_calls_section_begin|>' }}",
    "minimax-xml": "{{- ']~b]ai' ~ '\\n' }}{{ '<minimax:tool_call>' }}",
    "minimax-m3": "{%- set ns_token = ']<]minimax[>[' -%}{{- bos_token ~ 'ai' ~ '\\n' }}",
    "kimi-k3": "{{- '<|open|>' + tag -}}{{- close_tag('message') -}}{{- '<|end_of_msg|>' -}}",
    "muse-glimmer": "{{- '<|start|>assistant to=self<|message|>' + r + '<|eom|>' -}}",
    "glm": "[gMASK]<sop>{{ '<tool_call>' + tc.name }}<arg_key>{{ k }}</arg_key>",
    "mistral": "[INST]{{ m.content }}[/INST][TOOL_CALLS]{{ tc.name }}[ARGS]",
    "gemma4": "{{- '<|turn>model\\n' -}}{{- '<|channel>thought\\n<channel|>' -}}",
    "llama3-json": "<|start_header_id|>assistant<|end_header_id|>\\n\\n<|python_tag|>",
    # Llama 3 templates too: each supersedes llama3-json
    "firefunction": "<|start_header_id|>{{ ns.content + ' functools[' + calls | join(', ') }}",
    "functionary-v3.1": "<|start_header_id|>system<|end_header_id|>start_tag => `<function`",
    "functionary-v3.2": "<|start_header_id|>{{ '>>>all\\n' + message['content'] }}<|eot_id|>",
    # <tool_calls> as Apriel's templates write it too: the turn markers decide
    "minimax-m1": "{{ '<beginning_of_sentence>ai name=assistant\\n<tool_calls>\\n' -}}",
    "lfm2": "{{- '<|tool_call_start|>[' + (calls | join(', ')) + ']<|tool_call_end|>' -}}",
    "granite": "respond only with <|tool_call|> followed by a JSON list of tools used.",
    "nemotron-v2": "{{- '<SPECIAL_11>Assistant\\n' -}}{{- '<TOOLCALL>[' -}}",
    "qwen-xml": "<tool_call>\\n<function={{ name }}>\\n<parameter={{ k }}>",
    "hermes-json": "<tool_call>\\n{\"name\": {{ name }}}",
    "seed-oss": "{%- set toolcall_begin_token = '<seed:tool_call>' -%}{{ '<parameter=' + k }}",
    "minicpm5": "{{- '<function name=\"' ~ name ~ '\">' }}{{- '<param name=\"' ~ k ~ '\">' }}",
    "hunyuan3": "{%- set HYTK = ':opensource' %}{%- set t = '<tool_sep{}>'.format(HYTK) %}",
    "solar-open": "{{- '<|begin|>assistant<|tool_calls|>' }}{{- '<|tool_call:begin|>' + tc.id }}",
    "apertus": "{%- set tool_calls_token = '<|tools_prefix|>' -%}{{ '<|inner_prefix|>' }}",
    "gigachat3": '{%- set add_tokens = namespace(role_sep="<|role_sep|>\\n") -%}',
    "gigachat3.1": '{%- set add_tokens = namespace(function_call="<|function_call|>") -%}',
    "command-r7b": "<|CHATBOT_TOKEN|>{{ '<|START_THINKING|>' }}<|START_ACTION|>[",
    "command-r-plus": "You should use the `directly-answer` tool if calling the other tools",
    "apriel": "provide the final solution in the following format: [BEGIN FINAL RESPONSE] ...",
    "auto": "<|im_start|>{{ m.role }}\\n{{ m.content }}<|im_end|>",
}


@pytest.mark.parametrize("want", list(REAL_SNIPPETS))
def test_detect_reads_each_familys_markers(want):
    found = detect(REAL_SNIPPETS[want])
    assert found.family == want
    assert (found.marker == "") == (want == "auto")
    if found.marker:
        assert found.marker in REAL_SNIPPETS[want]


def test_every_family_has_its_own_markers_and_a_distinct_name():
    fams = families.REGISTRY.values()
    assert len({f.name for f in fams}) == len(fams)
    for fam in fams:  # a marker of one family never selects another one earlier in order
        for marker in fam.detect:
            assert detect(marker).family == fam.name, marker


def test_detection_order_comes_from_the_records():
    order = [f.name for f in families.detect_order()]
    for fam in families.REGISTRY.values():
        for other in fam.supersedes:
            assert order.index(fam.name) < order.index(other), (fam.name, other)
    assert order[-2:] == ["qwen-xml", "hermes-json"]  # the fallback families come last
    a = dataclasses.replace(families.REGISTRY["glm"], name="a", supersedes=("b",))
    b = dataclasses.replace(families.REGISTRY["glm"], name="b", supersedes=("a",))
    with pytest.raises(ValueError, match="cycle"):
        registry.detect_order((a, b))
    c = dataclasses.replace(b, supersedes=())
    assert [f.name for f in registry.detect_order((c, a))] == ["a", "b"]


@pytest.mark.parametrize(("family", "prompt", "want"), [
    ("deepseek", "<｜User｜>hi<｜Assistant｜><think>\n", "reasoning"),
    ("deepseek", "<｜User｜>hi<｜Assistant｜></think>", "content"),
    ("harmony", "<|start|>user<|message|>hi<|end|><|start|>assistant", "content"),
    ("harmony", "<|start|>assistant<|channel|>analysis<|message|>", "reasoning"),
    # an earlier analysis message is closed by its <|end|>: the new turn starts in content
    ("harmony", "<|channel|>analysis<|message|>x<|end|><|start|>assistant", "content"),
    ("gemma4", "<|turn>model\n<|channel>thought\n<channel|>", "content"),
    ("gemma4", "<|turn>model\n<|channel>thought\n", "reasoning"),
    ("mistral", "[/INST][THINK]", "reasoning"),
    ("mistral", "[/INST][THINK]x[/THINK]", "content"),
    ("llama3-json", "<think>", "content"),  # no reasoning in Llama 3: never starts in it
    # MiniMax-M1 opens its own <think>: its prompt never leaves it in the reasoning
    ("minimax-m1", "<beginning_of_sentence>ai name=assistant\n", "content"),
    ("minimax-m1", "<beginning_of_sentence>ai name=assistant\n<think>\n", "reasoning"),
    ("functionary-v3.2", "<|start_header_id|>assistant<|end_header_id|>\n\n>>>", "content"),
    ("minimax-xml", "]~b]ai\n<think>\n", "reasoning"),
    ("minimax-m3", "]~b]ai\n<mm:think>", "reasoning"),  # thinking_mode "enabled"
    ("minimax-m3", "]~b]ai\n</mm:think>", "content"),  # "disabled"
    ("minimax-m3", "]~b]ai\n", "content"),  # "adaptive": the model opens it, or not
    ("kimi-k3", '<|open|>message role="assistant"<|sep|><|open|>think<|sep|>', "reasoning"),
    ("kimi-k3", '<|open|>message role="assistant"<|sep|><|open|>response<|sep|>', "content"),
    ("muse-glimmer", "<|start|>user<|message|>hi<|eot|><|start|>assistant", "content"),
    ("nemotron-v2", "<SPECIAL_11>Assistant\n<think>\n", "reasoning"),
    ("nemotron-v2", "<SPECIAL_11>Assistant\n<think></think>", "content"),
    ("qwen-xml", "<|im_start|>assistant\n<think>\n", "reasoning"),
    ("command-r7b", "<|CHATBOT_TOKEN|><|START_THINKING|>", "reasoning"),  # Cohere2
    ("command-r7b", "<|CHATBOT_TOKEN|><|START_THINKING|><|END_THINKING|>", "content"),
    ("command-r-plus", "<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>", "content"),
    ("apriel", "<|begin_assistant|>\nHere are my reasoning steps:\n", "reasoning"),  # 1.6
    ("apriel", "<|assistant|>\n", "content"),  # 1.5: the model writes that line itself
    ("auto", "<|im_start|>assistant\n", "content"),
    ("solar-open", "<|begin|>user<|content|>hi<|end|><|begin|>assistant", "content"),
    ("solar-open", "<|begin|>assistant<|think|><|end|><|begin|>assistant", "content"),
    ("solar-open", "<|begin|>assistant<|think|>", "reasoning"),
    ("apertus", "<|user_start|>hi<|user_end|><|assistant_start|>", "content"),
    ("apertus", "<|assistant_start|><|inner_prefix|>", "reasoning"),
    ("gigachat3", "user<|role_sep|>\nhi<|message_sep|>\n\nassistant<|role_sep|>\n", "content"),
    ("seed-oss", "<seed:bos>assistant\n", "content"),
    ("minicpm5", "<|im_start|>assistant\n<think>\n", "reasoning"),
    ("hunyuan3", "<｜hy_Assistant:opensource｜><think:opensource></think:opensource>", "content"),
    ("hunyuan3", "<｜hy_Assistant:opensource｜><think:opensource>", "reasoning"),
])
def test_start_state_per_family(family, prompt, want):
    assert start_state(prompt, family) == want


def test_preserved_tokens_come_from_the_family_modules():
    for name in families.NAMES:
        listed = preserved_tokens(name)
        assert len(set(listed)) == len(listed)
        fam = families.get(name)
        if fam is not None:
            assert set(listed) == set(fam.preserved_tokens)
    # auto reads Qwen XML or Hermes JSON only, whatever other families are registered
    assert set(preserved_tokens("auto")) == set(preserved_tokens("qwen-xml")) | set(
        preserved_tokens("hermes-json"))
    assert preserved_tokens("no-such-family") == ()


# --- packs: detection on a GGUF's own template, --family --------------------------------------

HARMONY_TEMPLATE = ("{% for m in messages %}<|start|>{{ m.role }}<|channel|>final<|message|>"
                    "{{ m.content }}<|end|>{% endfor %}<|start|>assistant")


def _gguf(tmp_path: Path, template: str) -> Path:
    return write_gguf(tmp_path / "m.gguf", {
        "general.architecture": "gpt-oss", "general.name": "Tiny OSS",
        "tokenizer.chat_template": template, "tokenizer.ggml.tokens": ["<|return|>", "x"],
        "tokenizer.ggml.eos_token_id": 0})


def test_a_gguf_template_names_its_family_and_the_log_says_why(tmp_path, caplog):
    caplog.set_level("INFO", logger="prism")
    pack = pack_from_gguf(_gguf(tmp_path, HARMONY_TEMPLATE))
    registered = "harmony" in families.NAMES
    assert pack.family == ("harmony" if registered else "auto")
    assert "'<|channel|>'" in pack.family_origin
    assert "<|channel|>" in caplog.text and f"family {pack.family}" in caplog.text
    # <|end|> ends a Harmony message, not the turn: it must never be a stop string there
    assert "<|end|>" not in pack.stop and "<|return|>" in pack.stop
    assert pack.thinking


@pytest.mark.parametrize("fam", FAMILIES, ids=[f.name for f in FAMILIES])
def test_each_family_gguf_is_detected_from_its_template_or_architecture(fam, tmp_path):
    if fam.pack is None:  # Command R+: its only real template cannot render (its module says)
        pytest.skip(reason=f"{fam.name} ships no pack: its template needs tools")
    spec = builtin_packs()[fam.pack]
    template = (TEMPLATES / spec.template).read_text(encoding="utf-8")
    want = fam.name if fam.name in families.NAMES else "auto"
    pack = pack_from_gguf(write_gguf(tmp_path / "own.gguf", {
        "general.architecture": "x", "tokenizer.chat_template": template}))
    assert (pack.family, pack.thinking) == (want, fam.thinking)
    assert f"from {detect(template).marker!r}" in pack.family_origin
    assert pack.stop[: len(fam.stops)] == fam.stops
    # no template in the GGUF: its architecture picks the family's shipped one, where known
    arch = {"harmony": "gpt-oss", "glm": "glm4moe", "minimax-xml": "minimax-m2",
            "gemma4": "gemma4"}.get(fam.name)
    if arch is not None:
        bare = pack_from_gguf(write_gguf(tmp_path / "bare.gguf", {"general.architecture": arch}))
        assert bare.template == template and bare.family == want


def test_family_flag_overrides_the_template(tmp_path):
    gguf = _gguf(tmp_path, HARMONY_TEMPLATE)
    pack = resolve_pack(model=str(gguf), family="hermes-json")
    assert pack.family == "hermes-json" and pack.family_origin == "--family"
    with pytest.raises(Exception, match="unknown family"):
        resolve_pack(model=str(gguf), family="nonsense")


def test_a_pack_folders_toml_family_wins_over_the_template_and_says_so(tmp_path):
    _gguf(tmp_path, HARMONY_TEMPLATE)
    (tmp_path / "pack.toml").write_text('family = "hermes-json"\n', encoding="utf-8")
    pack = pack_from_dir(tmp_path)
    assert (pack.family, pack.family_origin) == ("hermes-json", str(tmp_path / "pack.toml"))


def test_builtin_pack_families_name_their_origin():
    pack = resolve_pack("qwen3-xml", require_model=False)
    assert pack.family_origin == "pack qwen3-xml"


def test_shipped_family_templates_are_detected_as_their_family():
    for spec in builtin_packs().values():
        fam = BY_FAMILY.get(spec.family)
        if fam is None:
            continue
        text = (TEMPLATES / spec.template).read_text(encoding="utf-8")
        assert detect(text).family == spec.family, spec.name


# --- shipped templates and parsers agree ------------------------------------------------------

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Weather by city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"},
                                                    "days": {"type": "integer"}},
                   "required": ["city"]}}}
CALLS = (("get_weather", {"city": "Paris", "days": 2}), ("get_weather", {"city": "Lyon"}))
# Thinking as each template must have it for its generation prompt to be a prefix of the
# rendered assistant turn (DeepSeek's opens <think> for the model but writes </think> in the
# history).
THINKING = {"deepseek": False, "dsml": True, "gemma4": True, "mistral": True}
# Hunyuan 3 shows the reasoning of a turn with calls in the history; its no_think prompt holds
# a closed block, so only a thinking prompt is a prefix of that turn.
THINKING["hunyuan3"] = True


# Families whose templates write one call per turn (GigaChat's: the first of `tool_calls`).
ONE_CALL_TURNS = {"gigachat3", "gigachat3.1"}


@pytest.mark.parametrize("fam", FAMILIES, ids=[f.name for f in FAMILIES])
def test_what_a_template_writes_as_the_models_calls_is_what_the_parser_reads(fam):
    """Render a turn with two calls after the prompt the model saw: the text the template
    writes for that turn, parsed from the prompt's start state, gives back those two calls
    (and the turn's answer and reasoning where the template shows them), with no anomaly."""
    assert fam.name in families.NAMES, f"no parser registered for the {fam.name} family"
    from engine.chat.request import Message
    from engine.parse.events import result_of
    from engine.parse.parser import OutputParser

    if fam.pack is None:  # Command R+: checked on its real template in its own test module
        pytest.skip(reason=f"{fam.name} ships no pack: its template needs tools")
    pack = resolve_pack(fam.pack, require_model=False)
    tmpl = pack.chat_template()
    thinking = THINKING.get(fam.name, pack.thinking)
    calls = tuple({"id": f"call_{i}", "type": "function",
                   "function": {"name": name, "arguments": args}}
                  for i, (name, args) in enumerate(CALLS))
    ask = Message("user", "Weather in Paris for two days, and Lyon?")
    turn = Message("assistant", "Checking.", reasoning_content="Need both cities.",
                   tool_calls=calls)
    prompt = tmpl.render([ask], tools=[WEATHER], enable_thinking=thinking)
    whole = tmpl.render([ask, turn], tools=[WEATHER], enable_thinking=thinking,
                        add_generation_prompt=False)
    assert whole.startswith(prompt), (prompt[-40:], whole[len(prompt) - 40:])
    written = whole[len(prompt):]
    ends = tuple({*pack.stop, pack.eos_token, "\n"} - {""})
    while written.endswith(ends):  # the end of turn is the engine's stop, not text
        written = written.removesuffix(next(e for e in ends if written.endswith(e)))
    parser = OutputParser(start=start_state(prompt, fam.name), family=fam.name,
                          tools=(WEATHER,))
    res = result_of(parser.feed(written) + parser.finish())
    want_calls = list(CALLS)[:1] if fam.name in ONE_CALL_TURNS else list(CALLS)
    assert [(c.name, c.arguments) for c in res.tool_calls] == want_calls, written
    assert res.content.strip() == ("Checking." if "Checking." in written else ""), written
    want = "Need both cities." if "Need both cities." in written else ""
    assert res.reasoning.strip() == want, written
    assert not any(res.anomalies.values()), (res.anomalies, written)


# --- history repair per family (engine/chat/detect.py repair_message) ----------------------------

GOLDEN = json.loads((Path(__file__).parent / "golden" / "chat_golden.json").read_text("utf-8"))
REPAIRS = [c for c in GOLDEN if "_repair_" in c["name"]
           and detect((TEMPLATES / c["template"]).read_text("utf-8")).family in BY_FAMILY]
# A call of each reasoning family, as its model writes it, and how its reasoning opens.
FAMILY_CALLS = {
    "deepseek": ("<think>", "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>"
                 '{"city": "Paris"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>'),
    "dsml": ("<think>", '<｜DSML｜function_calls>\n<｜DSML｜invoke name="get_weather">\n'
             '<｜DSML｜parameter name="city" string="true">Paris</｜DSML｜parameter>\n'
             "</｜DSML｜invoke>\n</｜DSML｜function_calls>"),
    "glm": ("<think>", "<tool_call>get_weather\n<arg_key>city</arg_key>\n"
            "<arg_value>Paris</arg_value>\n</tool_call>"),
    "kimi-k2": ("<think>", "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0"
                '<|tool_call_argument_begin|>{"city": "Paris"}<|tool_call_end|>'
                "<|tool_calls_section_end|>"),
    "minimax-xml": ("<think>", '<minimax:tool_call>\n<invoke name="get_weather">\n'
                    '<parameter name="city">Paris</parameter>\n</invoke>\n</minimax:tool_call>'),
    "minimax-m3": ("<mm:think>", "]<]minimax[>[<tool_call>\n]<]minimax[>["
                   '<invoke name="get_weather">]<]minimax[>[<city>Paris]<]minimax[>[</city>'
                   "]<]minimax[>[</invoke>\n"
                   "]<]minimax[>[</tool_call>"),
    "kimi-k3": ("<|open|>think<|sep|>", '<|open|>tools<|sep|><|open|>call tool="get_weather" '
                'index="1"<|sep|><|open|>argument key="city" type="string"<|sep|>Paris'
                "<|close|>argument<|sep|><|close|>call<|sep|><|close|>tools<|sep|>"),
    "mistral": ("[THINK]", '[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}'),
    "gemma4": ("<|channel>thought",
               '<|tool_call>call:get_weather{city:<|"|>Paris<|"|>}<tool_call|>'),
    "lfm2": ("<think>", '<|tool_call_start|>[get_weather(city="Paris")]<|tool_call_end|>'),
    "granite": ("<think>", '<|tool_call|>[{"name": "get_weather", "arguments": '
                '{"city": "Paris"}}]'),
    "nemotron-v2": ("<think>", '<TOOLCALL>[{"name": "get_weather", "arguments": {"city": '
                    '"Paris"}}]</TOOLCALL>'),
    "seed-oss": ("<seed:think>", "<seed:tool_call>\n<function=get_weather>\n"
                 "<parameter=city>Paris</parameter>\n</function>\n</seed:tool_call>"),
    "minicpm5": ("<think>", '<function name="get_weather"><param name="city">Paris</param>'
                 "</function>"),
    "hunyuan3": ("<think:opensource>", "<tool_calls:opensource>\n<tool_call:opensource>"
                 "get_weather<tool_sep:opensource>\n<arg_key:opensource>city</arg_key:opensource>"
                 "\n<arg_value:opensource>Paris</arg_value:opensource>\n</tool_call:opensource>\n"
                 "</tool_calls:opensource>"),
}


@pytest.mark.parametrize("case", REPAIRS, ids=[c["name"] for c in REPAIRS])
def test_python_and_jinja_repairs_render_alike(case):
    """Prism repairs the history in Python before rendering (the pack's family), the shipped
    template repairs it again in jinja: the prompt is still what transformers renders from the
    unrepaired history with the template alone."""
    source = (TEMPLATES / case["template"]).read_text("utf-8")
    family = detect(source).family
    msgs = [Message(**{**d, "tool_calls": tuple(d.get("tool_calls", ()))})
            for d in case["messages"]]
    assert repair_history(msgs, family) != tuple(msgs)  # Python did repair something
    tmpl = ChatTemplate(source, bos_token=case["bos_token"], eos_token=case["eos_token"],
                        family=family)
    got = tmpl.render(msgs, tools=case["tools"],
                      add_generation_prompt=case["add_generation_prompt"],
                      enable_thinking=case["enable_thinking"])
    assert got == case["expected"]


@pytest.mark.parametrize("family", sorted(FAMILY_CALLS))
def test_repair_moves_a_swallowed_call_out_of_the_reasoning(family):
    opener, call = FAMILY_CALLS[family]
    # (a) the content opens the reasoning and never closes it
    fixed = repair_message(Message("assistant", opener + "\nThe user wants weather.\n" + call),
                           family)
    assert (fixed.reasoning_content, fixed.content) == ("The user wants weather.", call)
    # (b) the reasoning ends with the call; the answer after it is kept after the call
    fixed = repair_message(Message("assistant", "Done.", reasoning_content="Look.\n" + call),
                           family)
    assert (fixed.reasoning_content, fixed.content) == ("Look.", call + "\nDone.")
    assert repair_message(fixed, family) == fixed  # once is enough
    # what the parser would not read as a call stays reasoning: quoted, fenced, unfinished
    for reasoning in ("Quoted `" + call + "` here.", "Like:\n```\n" + call + "\n```",
                      "Look.\n" + call[: len(call) // 2]):
        turn = Message("assistant", "", reasoning_content=reasoning)
        assert repair_message(turn, family) == turn
    # a turn that has its calls already, other roles, and other families' markup: untouched
    done = Message("assistant", "", reasoning_content="Look.\n" + call,
                   tool_calls=({"id": "c", "type": "function",
                                "function": {"name": "get_weather", "arguments": {}}},))
    assert repair_message(done, family) == done
    assert repair_message(Message("user", opener + "\n" + call), family).content == (
        opener + "\n" + call)
    other = "<tool_call>\n<function=get_weather>\n</function>\n</tool_call>"
    turn = Message("assistant", "", reasoning_content="Look.\n" + other)
    assert repair_message(turn, family) == turn


@pytest.mark.parametrize("family", ["harmony", "llama3-json"])
def test_families_without_a_reasoning_block_to_hide_in_are_never_repaired(family):
    turn = Message("assistant", "", reasoning_content='Look.\n{"name": "f", "parameters": {}}')
    assert repair_message(turn, family) == turn


# --- the engine: exactly the preserved special tokens render as text ---------------------------


def _generate(engine, grammar: str) -> tuple[list[Token], Finish]:
    toks: list[Token] = []
    done, fin = threading.Event(), []
    job = Job(prompt="<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n",
              on_token=toks.append, on_finish=lambda f: (fin.append(f), done.set()),
              grammar=grammar, max_tokens=12, sampling=Sampling(temperature=0.0))
    engine.submit(job)
    assert done.wait(60)
    return toks, fin[0]


@pytest.mark.model
def test_the_engine_renders_exactly_the_preserved_special_tokens(default_model):
    from engine.backends.llama.engine import LlamaEngine
    from engine.backends.llama.vocab import Vocab

    vocab = Vocab(default_model)
    try:
        im_start, other = vocab.tokenize("<|im_start|>")[-1], vocab.tokenize("<repo_name>")[-1]
    finally:
        vocab.close()
    # A token reference (`<|im_start|>`, `<[id]>`) in a grammar makes the model emit that very
    # token, not its text spelled out in plain pieces.
    grammar = f'root ::= "a" <|im_start|> "b" <[{other}]> "c"'
    plain = LlamaEngine(default_model, n_ctx=512)
    kept = LlamaEngine(default_model, n_ctx=512, preserved=("<|im_start|>", "<think>"))
    try:
        assert plain.ready.wait(60) and kept.ready.wait(60)
        toks, fin = _generate(kept, grammar)
        assert fin.reason == "stop", fin
        assert [t.id for t in toks][1] == im_start and toks[3].id == other
        assert "".join(t.text for t in toks) == "a<|im_start|>bc"  # <repo_name> stays hidden
        assert kept.detokenize([im_start, other]) == "<|im_start|>"
        toks, _ = _generate(plain, grammar)
        assert "".join(t.text for t in toks) == "abc"  # nothing preserved: both invisible
        assert plain.detokenize([im_start]) == ""
    finally:
        plain.close()
        kept.close()
