"""Templates that run in llama.cpp run here, the sandbox as tight as before (issue 19, item 5).

On the real templates of llama.cpp's library (/work/shared/templates; skipped, saying so, where
that folder is missing), each rendering is compared with what transformers renders:
tests/engine/chat/golden/compat.json holds transformers' output, computed once (transformers
5.24, `render_jinja_template`); where transformers refuses what llama.cpp runs, the case's
`reference` says which one change was made to it to get the expected text:
- Kimi K2's `namespace(ids=[])` queue: `.append` / `.pop` on the template's own list;
- `tools | map(attribute='function') | tojson` (llama.cpp's DeepSeek R1 template): a generator;
- Functionary v3.2's `'\\n' + arguments`: the arguments as the JSON string a client sends;
- Gemma 2's "System role not supported": the first system message merged into the first user
  turn, as llama.cpp's common/chat.cpp does;
- `tools` defined and None without tools, a list with them (Llama 3.x, Mistral, Granite, Hermes
  and Command R `tool_use` templates), as transformers passes it;
- a GGUF's `tokenizer.chat_template.tool_use`, rendering the requests that declare tools.
The sandbox tests need no template folder: the CVE-2024-34359 escapes and every mutator on what
a template is given stay refused.
"""

from __future__ import annotations

import json
import logging
import struct
from pathlib import Path

import pytest

import engine.chat.template as template_mod
from engine.chat.packs import pack_from_dir, pack_from_gguf
from engine.chat.request import ChatRequest, Message
from engine.chat.template import ChatTemplate, TemplateError
from engine.service import Service
from tests.support import LIBRARY

TEMPLATES = LIBRARY
GOLDEN = Path(__file__).parent / "golden" / "compat.json"
CASES = json.loads(GOLDEN.read_text(encoding="utf-8"))["cases"]
needs_templates = pytest.mark.skipif(
    not TEMPLATES.is_dir(),
    reason=f"{TEMPLATES} (the 71 real chat templates of llama.cpp's library) is missing")


def real(name: str) -> str:
    return (TEMPLATES / name).read_text(encoding="utf-8")


def messages(dicts: list[dict]) -> list[Message]:
    return [Message(**{**d, "tool_calls": tuple(d.get("tool_calls", ()))}) for d in dicts]


def by_name(name: str) -> dict:
    return next(c for c in CASES if c["name"] == name)


# --- the real templates against transformers ---------------------------------------------------


def test_the_goldens_cover_every_item():
    assert {c["item"] for c in CASES} == {1, 2, 3, 4, 5}
    assert {c["template"] for c in CASES if c["item"] == 1} == {
        "Kimi-K2-Instruct.jinja", "Kimi-K2-Thinking.jinja", "moonshotai-Kimi-K2.jinja"}
    fives = [c for c in CASES if c["item"] == 5]
    assert {c["name"].split(":")[0] for c in fives} == {"tools_none", "tools_given"}
    assert any("error" in c for c in fives) and any("tool_use" in c["template"] for c in fives)


@needs_templates
@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_real_template_renders_as_transformers(case):
    tmpl = ChatTemplate(real(case["template"]), bos_token=case["bos_token"],
                        eos_token=case["eos_token"])
    render = lambda: tmpl.render(messages(case["messages"]), tools=case["tools"] or ())  # noqa: E731
    if "error" in case:  # transformers fails too: so must Prism, with a TemplateError
        with pytest.raises(TemplateError, match=case["error"]):
            render()
    else:
        assert render() == case["expected"]


@needs_templates
@pytest.mark.parametrize("name", ["Kimi-K2-Instruct.jinja", "Kimi-K2-Thinking.jinja"])
def test_kimi_k2_pairs_each_tool_result_with_its_call(name):
    out = by_name(f"kimi_namespace_append:{name}")["expected"]
    calls = [out.index(f"<|tool_call_begin|>functions.get_weather:{i}") for i in (0, 1)]
    results = [out.index(f"## Return of functions.get_weather:{i}") for i in (0, 1)]
    assert calls[0] < calls[1] < results[0] < results[1]
    got = ChatTemplate(real(name)).render(messages(by_name(f"kimi_namespace_append:{name}")
                                                   ["messages"]), tools=())
    assert "## Return of functions.get_weather:1\n" in got  # without tools as well


@needs_templates
def test_functionary_v32_gets_string_arguments_and_others_keep_objects():
    fn = ChatTemplate(real("meetkai-functionary-medium-v3.2.jinja"))
    assert fn.string_arguments
    out = fn.render(messages(by_name("string_arguments:functionary-v3.2")["messages"]))
    assert '>>>get_weather\n{"city": "Zürich", "days": 2}<|eot_id|>' in out
    for name in ("Kimi-K2-Instruct.jinja", "meetkai-functionary-medium-v3.1.jinja",
                 "Qwen-Qwen3-0.6B.jinja", "meta-llama-Llama-3.1-8B-Instruct.jinja"):
        assert not ChatTemplate(real(name)).string_arguments, name


@needs_templates
def test_gemma2_merges_the_system_message_and_says_so_once(caplog, monkeypatch):
    monkeypatch.setattr(template_mod, "_LOGGED", set())  # earlier tests may have said it already
    gemma = ChatTemplate(real("google-gemma-2-2b-it.jinja"), bos_token="<bos>")
    assert gemma.refuses_system
    case = by_name("system_merged:gemma-2:system_then_user")
    with caplog.at_level(logging.INFO, logger="prism"):
        for _ in range(3):
            assert gemma.render(messages(case["messages"])) == case["expected"]
        ChatTemplate(gemma.source).render(messages(case["messages"]))  # the same template again
    merged = [r for r in caplog.records if "merges the first system message" in r.getMessage()]
    assert len(merged) == 1 and merged[0].levelno == logging.INFO
    # Without a system message nothing changes; templates that take the role are left alone.
    assert gemma.render([Message("user", "hi")]) == "<bos><start_of_turn>user\nhi<end_of_turn>\n" \
        "<start_of_turn>model\n"
    for name in ("meta-llama-Llama-3.1-8B-Instruct.jinja", "Qwen-Qwen3-0.6B.jinja",
                 "microsoft-Phi-3.5-mini-instruct.jinja"):
        assert not ChatTemplate(real(name)).refuses_system, name


@needs_templates
def test_every_real_template_still_renders_a_plain_chat():
    """No template of the 71 that rendered a plain chat before fails now (the sandbox change,
    the read-only copies, the probes)."""
    chat = messages([{"role": "system", "content": "Be brief."},
                     {"role": "user", "content": "hi"}])
    failing = []
    for path in sorted(TEMPLATES.glob("*.jinja")):
        try:
            ChatTemplate(path.read_text(encoding="utf-8")).render(chat)
        except TemplateError as exc:
            failing.append(f"{path.name}: {exc}")
    # firefunction v2 needs its own `functions` variable; the tool_use templates need tools
    # (both fail in transformers alike, see the goldens).
    assert all(f.split(":")[0] in {
        "fireworks-ai-llama-3-firefunction-v2.jinja",
        "CohereForAI-c4ai-command-r-plus-tool_use.jinja",
        "NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use.jinja",
        "NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja"} for f in failing), failing


# --- the sandbox ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "escape",
    [
        # CVE-2024-34359 and its kin: dunders, globals, format strings.
        "{{ ''.__class__.__mro__[1].__subclasses__() }}",
        "{{ cycler.__init__.__globals__ }}",
        "{{ joiner.__init__.__globals__.os }}",
        "{{ ''.__class__ }}",
        "{{ messages.__class__.__base__ }}",
        "{{ (lipsum|attr('__globals__')) }}",
        "{{ '{0.__class__.__mro__}'.format(1) }}",
        "{{ ''.format.__globals__ }}",
        "{% set ns = namespace() %}{% set ns._Namespace__attrs = 1 %}",
        "{{ namespace(_x=1) }}",
        # The mutators now allowed on the template's own lists give no way out.
        "{% set l = [] %}{{ l.append.__self__ }}",
        "{% set l = [] %}{{ l.append|attr('__self__') }}",
        "{% set l = [] %}{{ l.pop.__self__ }}",
        "{% set l = [] %}{% set _ = l.append(cycler.__init__) %}{{ l[0] }}",
        "{% set ns = namespace(ids=[]) %}{{ ns.ids.__class__.__subclasses__() }}",
        # What the template was given stays read-only, however it is reached.
        "{{ messages.append(1) }}",
        "{{ messages.pop() }}",
        "{{ messages[0].update(role='system') }}",
        "{{ messages[0].pop('content') }}",
        "{{ (messages|map(attribute='clear')|first)() }}",
        "{{ tools.append(1) }}",
        "{{ tools[0]['function'].clear() }}",
        "{{ tools[0].function.parameters.properties.setdefault('x', 1) }}",
        "{{ given.append(1) }}",
        "{% set l = given %}{{ l.pop() }}",
        # Other mutators stay refused on any object, the template's own included.
        "{% set d = {} %}{{ d.update(a=1) }}",
        "{% set d = {'a': 1} %}{{ d.pop('a') }}",
        "{% set l = [2, 1] %}{{ l.sort() }}",
        "{% set l = [] %}{{ l.extend([1]) }}",
        "{% set l = [] %}{{ l.insert(0, 1) }}",
        "{% set l = [1] %}{{ l.clear() }}",
        # Growing a list without end (appending to the list a loop walks) is cut short.
        "{% set l = [0] %}{% for x in l %}{% set _ = l.append(x) %}{% endfor %}",
    ],
)
def test_sandbox_refuses_escapes_and_mutating_what_it_was_given(escape):
    tools = [{"type": "function", "function": {
        "name": "f", "description": "d",
        "parameters": {"type": "object", "properties": {"a": {"type": "string"}}}}}]
    before = json.dumps(tools)
    given = [1, 2]
    with pytest.raises(TemplateError):
        ChatTemplate(escape).render([Message("user", "hi")], tools=tools,
                                    extra={"given": given})
    assert json.dumps(tools) == before and given == [1, 2]
    assert ChatTemplate("{{ messages[0].content }}").render([Message("user", "ok")]) == "ok"


def test_a_template_may_change_the_lists_it_builds_itself():
    tmpl = ChatTemplate(
        "{% set q = namespace(ids=[]) %}{% set _ = q.ids.append('a') %}"
        "{% set _ = q.ids.append('b') %}{{ q.ids.pop(0) }}|{{ q.ids | tojson }}|"
        "{% set copy = messages[:] %}{% set _ = copy.append(1) %}"
        "{{ copy | length }}{{ messages | length }}|"
        "{% set names = tools | map(attribute='function') | list %}{% set _ = names.pop() %}"
        "{{ names | length }}{{ tools | length }}")
    tools = [{"type": "function", "function": {"name": "f"}}]
    assert tmpl.render([Message("user", "hi")], tools=tools) == 'a|["b"]|21|01'
    assert tools == [{"type": "function", "function": {"name": "f"}}]


def test_tojson_lists_generators_and_still_refuses_the_rest():
    tools = [{"type": "function", "function": {"name": "f", "description": "<é>"}},
             {"type": "function", "function": {"name": "g"}}]
    tmpl = ChatTemplate("{{ tools | map(attribute='function') | tojson }}|"
                        "{{ tools | map(attribute='function') | map(attribute='name') "
                        "| tojson(separators=(',', ':')) }}|"
                        "{{ {'names': tools | map(attribute='function.name')} | tojson }}")
    assert tmpl.render([], tools=tools) == (
        '[{"name": "f", "description": "<é>"}, {"name": "g"}]|["f","g"]|'
        '{"names": ["f", "g"]}')
    for bad in ("{{ nothing | tojson }}", "{{ cycler | tojson }}", "{{ namespace(a=1) | tojson }}"):
        with pytest.raises(TemplateError):
            ChatTemplate(bad).render([])


def test_string_arguments_only_for_templates_that_need_them():
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": {"a": "é"}}}
    chat = [Message("user", "hi"), Message("assistant", "", tool_calls=(call,))]
    concat = ChatTemplate("{% for m in messages %}{% for c in m.tool_calls or [] %}"
                          "{{ c.function.name + ' ' + c.function.arguments }}"
                          "{% endfor %}{% endfor %}")
    assert concat.string_arguments and concat.render(chat) == 'f {"a": "é"}'
    objects = ChatTemplate("{% for m in messages %}{% for c in m.tool_calls or [] %}"
                           "{{ c.function.arguments | tojson }}{% endfor %}{% endfor %}")
    assert not objects.string_arguments and objects.render(chat) == '{"a": "é"}'
    assert chat[1].tool_calls[0]["function"]["arguments"] == {"a": "é"}  # the caller's: kept


@needs_templates
def test_a_template_that_shows_calls_only_under_a_null_content_gets_one():
    # DeepSeek R1 Distill Llama's template renders an assistant's calls only when its content
    # `is none`, what OpenAI clients send beside tool_calls; Prism keeps "" and gives None back.
    call = {"id": "c1", "type": "function",
            "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}
    chat = [Message("user", "Weather?"), Message("assistant", "", tool_calls=(call,)),
            Message("tool", '{"t": 2}', tool_call_id="c1", name="get_weather")]
    distill = ChatTemplate(real("deepseek-ai-DeepSeek-R1-Distill-Llama-8B.jinja"))
    assert distill.null_call_content and distill.string_arguments
    assert ('<｜Assistant｜><｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>'
            'get_weather\n```json\n{"city": "Paris"}\n```<｜tool▁call▁end｜>'
            '<｜tool▁outputs▁begin｜><｜tool▁output▁begin｜>{"t": 2}') in distill.render(chat)
    for name in ("deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja", "Qwen-Qwen3-0.6B.jinja",
                 "meta-llama-Llama-3.1-8B-Instruct.jinja", "tencent-Hy3.jinja"):
        assert not ChatTemplate(real(name)).null_call_content, name


def test_null_call_content_only_where_it_shows_the_calls():
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    chat = [Message("user", "hi"), Message("assistant", "", tool_calls=(call,))]
    loop = "{% for m in messages %}"
    only_null = ChatTemplate(loop + "{% if m.content is none %}{{ m.tool_calls[0].function.name }}"
                             "{% else %}[{{ m.content }}]{% endif %}{% endfor %}")
    assert only_null.null_call_content and only_null.render(chat) == "[hi]f"
    # A template that prints the content whatever it is would write "None": it keeps "".
    prints = ChatTemplate(loop + "{{ m.content }}{% for c in m.tool_calls or [] %}"
                          "{% if m.content is none %}{{ c.function.name }}{% endif %}"
                          "{% endfor %}{% endfor %}")
    assert not prints.null_call_content and prints.render(chat) == "hi"
    either = ChatTemplate(loop + "{% for c in m.tool_calls or [] %}{{ c.function.name }}"
                          "{% endfor %}{% endfor %}")
    assert not either.null_call_content and either.render(chat) == "f"


def test_system_merge_rules():
    refuse = ("{% if messages[0].role == 'system' %}{{ raise_exception('no system') }}{% endif %}"
              "{% for m in messages %}[{{ m.role }}:{{ m.content }}]{% endfor %}")
    tmpl = ChatTemplate(refuse)
    sys_msg = Message("system", "S")
    assert tmpl.render([sys_msg, Message("user", "U")]) == "[user:S\nU]"
    assert tmpl.render([sys_msg, Message("user", "")]) == "[user:S]"
    assert tmpl.render([sys_msg]) == "[user:S]"  # alone: a user turn of its own
    assert tmpl.render([sys_msg, Message("assistant", "A")]) == "[user:S][assistant:A]"
    with pytest.raises(TemplateError, match="no system"):  # any other refusal stays one
        ChatTemplate("{{ raise_exception('no system') }}").render([sys_msg, Message("user", "U")])


# --- the GGUF's tool_use template -----------------------------------------------------------------


def _gguf_str(s: str) -> bytes:
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def write_gguf(path: Path, kv: dict[str, object]) -> Path:
    """A header-only GGUF (the reader never looks past the metadata): strings, ints, and string
    arrays."""
    body = b""
    for key, value in kv.items():
        body += _gguf_str(key)
        if isinstance(value, int):
            body += struct.pack("<II", 4, value)
        elif isinstance(value, str):
            body += struct.pack("<I", 8) + _gguf_str(value)
        else:
            body += struct.pack("<IIQ", 9, 8, len(value)) + b"".join(_gguf_str(x) for x in value)
    path.write_bytes(b"GGUF" + struct.pack("<IQQ", 3, 0, len(kv)) + body + b"\0" * 64)
    return path


CHATML = ("{{ bos_token }}{% for message in messages %}{{'<|im_start|>' + message['role'] + "
          "'\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}"
          "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")


def hermes_gguf(tmp_path: Path, **templates: str) -> Path:
    kv: dict[str, object] = {"general.architecture": "llama", "general.name": "Tiny Hermes",
                             "tokenizer.ggml.tokens": ["<unk>", "<|begin_of_text|>", "<|im_end|>"],
                             "tokenizer.ggml.bos_token_id": 1, "tokenizer.ggml.eos_token_id": 2}
    kv.update({("tokenizer.chat_template" + ("." + k if k != "default" else "")): v
               for k, v in templates.items()})
    return write_gguf(tmp_path / "hermes.gguf", kv)


class _Engine:
    """All that `Service.render` needs of an engine."""

    name = "stub"
    n_ctx = 4096

    def tokenize(self, text: str) -> list[int]:
        return list(text.encode())


@needs_templates
def test_the_service_renders_requests_with_tools_with_the_tool_use_template(tmp_path, caplog):
    tool_use = real("NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use.jinja")
    with caplog.at_level(logging.INFO, logger="prism"):
        pack = pack_from_gguf(hermes_gguf(tmp_path, default=CHATML, tool_use=tool_use))
    assert (pack.template, pack.tool_template) == (CHATML, tool_use)
    assert pack.family == "hermes-json"  # the calls are written as the tool_use template says
    assert any("tool_use chat template" in r.getMessage() for r in caplog.records)
    service = Service(_Engine(), pack)  # type: ignore[arg-type]
    case = by_name("tools_given:NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use")
    chat = tuple(messages(case["messages"]))
    assert service.render(ChatRequest(chat, tools=tuple(case["tools"]))) == case["expected"]
    assert service.render(ChatRequest(chat)) == ChatTemplate(
        CHATML, bos_token="<|begin_of_text|>").render(chat)
    assert service.template.renders_tools  # probed with a tool: the tool_use template shows it
    assert pack.chat_template().render(chat, tools=case["tools"]) == case["expected"]


def test_tool_use_template_alone_broken_or_replaced(tmp_path, caplog):
    tool_use = "{% for t in tools %}<tool>{{ t.function.name }}</tool>{% endfor %}" + CHATML
    alone = pack_from_gguf(hermes_gguf(tmp_path, tool_use=tool_use))
    assert (alone.template, alone.tool_template) == (tool_use, "")  # llama.cpp's default then
    assert "tool_use" in alone.template_origin
    with caplog.at_level(logging.WARNING, logger="prism"):
        broken = pack_from_gguf(hermes_gguf(tmp_path, default=CHATML, tool_use="{% if %}"))
    assert (broken.template, broken.tool_template) == (CHATML, "")
    assert any("does not compile" in r.getMessage() for r in caplog.records)
    # A pack folder's own template replaces the GGUF's, its tool_use variant with it.
    folder = tmp_path / "pack"
    (folder / "tokenizer").mkdir(parents=True)
    hermes_gguf(tmp_path, default=CHATML, tool_use=tool_use).rename(folder / "m.gguf")
    (folder / "tokenizer" / "chat_template.jinja").write_text(CHATML + "!", encoding="utf-8")
    assert pack_from_dir(folder).tool_template == ""
