"""Every family with a pack, on the real engine, through a GGUF that carries its real template.

A user's model of a family comes as a GGUF whose `tokenizer.chat_template` is the model's own
and whose vocabulary has the family's markers as special tokens. Each test here makes that
model from the default one (SmolLM2-135M, tests/support.py `gguf_with_template`): the real
template from llama.cpp's library (../shared/templates; the pack's own template where the
library lacks it), and SmolLM2's unused control tokens (`<repo_name>` … `<empty_output>`,
ids 3-16) renamed to the family's preserved tokens, so they are single special tokens of the
vocabulary as in the real model's. Then, with the real LlamaEngine and Service, loaded as
`prism serve --model FILE.gguf` loads them (no --pack, app/config.py `build_service`):

- the family is detected from the GGUF's template alone;
- its preserved tokens render as their text and the other special tokens stay invisible;
- a forced call (`tool_choice` naming the tool, the family's record's `grammar`) comes out
  in the family's own markup, its markers as the single special tokens and the rest in
  ordinary pieces, and the parser reads it back as the call, the same way whole, one
  character at a time and in random chunks.

The weights are SmolLM2's, so only what a grammar shapes is meaningful: the tests never read
free text. Command R+ has no pack (its template cannot render a request without tools), but
its GGUF is a user's model all the same: it runs here too. Each family costs a GGUF copy
(under a second from a cached reader) and an engine load; the call is a few dozen tokens.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import jsonschema
import pytest

from engine.chat.detect import preserved_tokens, start_state
from engine.chat.packs import TEMPLATES, builtin_packs, resolve_pack
from engine.chat.request import ChatRequest, Message, Sampling
from engine.grammar.tools import request_grammar
from engine.parse import families
from engine.parse.events import ToolCall
from engine.service import Service
from tests.engine.grammar.test_tools import accepts
from tests.engine.parse.parser_harness import parse_all_ways
from tests.support import LIBRARY, gguf_with_template

pytestmark = pytest.mark.model

# The model whose real template each family is tried with (the library has several for some).
TEMPLATE = {
    "apertus": "Apertus-8B-Instruct.jinja",
    "apriel": "Apriel-1.6-15b-Thinker-fixed.jinja",
    "command-r-plus": "CohereForAI-c4ai-command-r-plus-tool_use.jinja",
    "command-r7b": "CohereForAI-c4ai-command-r7b-12-2024-tool_use.jinja",
    "deepseek": "deepseek-ai-DeepSeek-V3.1.jinja",
    "dsml": "deepseek-ai-DeepSeek-V3.2.jinja",
    "firefunction": "fireworks-ai-llama-3-firefunction-v2.jinja",
    "functionary-v3.1": "meetkai-functionary-medium-v3.1.jinja",
    "functionary-v3.2": "meetkai-functionary-medium-v3.2.jinja",
    "gemma4": "google-gemma-4-31B-it.jinja",
    "gigachat3": "GigaChat3-10B-A1.8B.jinja",
    "gigachat3.1": "GigaChat3.1-10B-A1.8B.jinja",
    "glm": "GLM-4.6.jinja",
    "granite": "ibm-granite-granite-3.3-2B-Instruct.jinja",
    "harmony": "openai-gpt-oss-120b.jinja",
    "hermes-json": "Qwen-Qwen2.5-7B-Instruct.jinja",
    "hunyuan3": "tencent-Hy3.jinja",
    "kimi-k2": "Kimi-K2-Instruct.jinja",
    "kimi-k3": "Kimi-K3.jinja",
    "lfm2": "LFM2-8B-A1B.jinja",
    "llama3-json": "meta-llama-Llama-3.1-8B-Instruct.jinja",
    "minicpm5": "openbmb-MiniCPM5-1B.jinja",
    "minimax-m1": "MiniMax-M1.jinja",
    "minimax-m3": "MiniMax-M3.jinja",
    "minimax-xml": "MiniMax-M2.jinja",
    "mistral": "Mistral-Small-3.2-24B-Instruct-2506.jinja",
    "muse-glimmer": "muse-glimmer.jinja",
    "nemotron-v2": "NVIDIA-Nemotron-Nano-v2.jinja",
    "qwen-xml": "Qwen3-Coder.jinja",
    "seed-oss": "ByteDance-Seed-OSS.jinja",
    "solar-open": "upstage-Solar-Open-100B.jinja",
}
# SmolLM2's control tokens that its own template never writes: renamed to a family's markers.
FREE_IDS = range(3, 17)
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city.",
    "parameters": {"type": "object", "required": ["city"], "properties": {
        # An enumerated value keeps SmolLM2's call short (a free string rambles on).
        "city": {"type": "string", "description": "The city.", "enum": ["Paris", "London"]}}}}}
# One tool: every template writes its declaration into the prompt, and prompt tokens are most
# of each test's time on two cores.
TOOLS = (WEATHER,)


def covered() -> list[str]:
    """Every family that ships a pack, and Command R+ (a user's GGUF, no pack)."""
    packs = builtin_packs()
    return sorted(f.name for f in families.REGISTRY.values()
                  if (f.pack in packs or f.name == "command-r-plus"))


def real_template(family: str) -> str:
    name = TEMPLATE[family]
    if (LIBRARY / name).is_file():
        return (LIBRARY / name).read_text(encoding="utf-8")
    pack = families.get(family).pack
    if pack is None:
        pytest.skip(reason=f"{family} ships no template and ../shared/templates/{name} is "
                    "missing")
    return (TEMPLATES / builtin_packs()[pack].template).read_text(encoding="utf-8")


def renamed(family: str) -> dict[int, str]:
    """The family's preserved tokens, given SmolLM2's free control-token ids."""
    marks = preserved_tokens(family)
    assert len(marks) <= len(FREE_IDS), f"{family} keeps more tokens than SmolLM2 has free"
    return dict(zip(FREE_IDS, marks, strict=False))


@pytest.fixture(scope="session")
def family_gguf(default_model: Path, tmp_path_factory) -> Iterator:
    """family_gguf(family): the default model's GGUF with the family's real template and
    special tokens, written once a session (and removed after it: 31 copies of 98 MB)."""
    pytest.importorskip("gguf", reason="writing a GGUF copy needs gguf-py (the dev extra)")
    folder = tmp_path_factory.mktemp("family-ggufs")
    made: dict[str, Path] = {}

    def make(family: str) -> Path:
        if family not in made:
            made[family] = gguf_with_template(default_model, folder / f"{family}.gguf",
                                              real_template(family), tokens=renamed(family))
        return made[family]

    yield make
    for path in made.values():
        path.unlink(missing_ok=True)


@pytest.fixture
def served(family_gguf):
    """served(family): the Service `prism serve --model COPY.gguf` builds on the copy."""
    from engine.backends.llama.engine import LlamaEngine

    engines = []

    def make(family: str) -> Service:
        pack = resolve_pack(None, str(family_gguf(family)))  # no --pack: detected
        engine = LlamaEngine(pack.gguf, n_ctx=2048, preserved=preserved_tokens(pack.family))
        engines.append(engine)
        assert engine.ready.wait(120) and engine.load_error is None, engine.load_error
        return Service(engine, pack)

    yield make
    for engine in engines:
        engine.close()


def forced_request() -> ChatRequest:
    """A call to get_weather, forced by name (the grammar allows exactly one)."""
    return ChatRequest(
        messages=(Message("user", "Weather in Paris?"),), tools=TOOLS,
        tool_choice="function", tool_name="get_weather", max_tokens=80,
        sampling=Sampling(temperature=0.0))


def forced(service: Service, request: ChatRequest):
    run = service.submit(request)
    result = run.wait(300)
    assert result is not None, "the run did not finish"
    return run, result


def end_of_generation(engine, ids) -> set[int]:
    """Those of `ids` that llama.cpp's vocabulary counts as ending generation."""
    import llama_cpp as C

    vocab = engine._vocab._model.vocab  # the engine's own vocab-only model
    return {tok for tok in ids if C.llama_vocab_is_eog(vocab, tok)}


@pytest.mark.parametrize("family", covered())
def test_a_family_gguf_is_detected_and_its_forced_call_read_back(served, family):
    service = served(family)
    pack, engine = service.pack, service.engine
    # (a) the family, from the GGUF's own template: what a user loading the model gets
    assert pack.family == family, pack.family_origin
    assert pack.template == real_template(family)
    assert pack.template_origin.startswith("GGUF metadata of")

    # (b) the preserved tokens are single special tokens rendered as their text; the other
    # special tokens (ChatML's, which no family here keeps) render as nothing
    ids = {text: i for i, text in renamed(family).items()}
    assert set(ids) == set(preserved_tokens(family))
    for text, tok in ids.items():
        assert engine.tokenize(text)[-1:] == [tok], text
        assert engine.detokenize([tok]) == text
    assert engine.detokenize([engine.tokenize("<|im_start|>")[-1]]) == ""

    # (c) a forced call, in the family's markup, read back as the call
    request = forced_request()
    if start_state(service.render(request), family) == "reasoning":
        # The template opens the reasoning even with thinking off (Apriel, Kimi K3, MiniMax-M2,
        # Nemotron v2): the grammar leaves the reasoning free until the family's closer, which
        # SmolLM2 never writes within any budget. What the model would write there is checked
        # against the same grammar instead: llama.cpp's sampler takes it whole, token by token.
        raw = families.get(family).writer.write(
            "I call get_weather.", "", [ToolCall("c", "get_weather", {"city": "Paris"}, 0)],
            opened=True)
        grammar = request_grammar(request, family, "reasoning", engine)
        assert accepts(engine, grammar, raw), raw
        tokens = engine.tokenize(raw)
        start, calls = "reasoning", [("get_weather", {"city": "Paris"})]
    else:
        run, result = forced(service, request)
        assert run.start_state == "content"
        raw, grammar = "".join(t.text for t in run.tokens), run.job.grammar
        tokens = [t.id for t in run.tokens]
        assert "".join(engine.detokenize([t]) for t in tokens) == raw
        start, calls = "content", [(c.name, c.arguments) for c in result.tool_calls]
        assert [name for name, _ in calls] == ["get_weather"], raw
        args = calls[0][1]
        args = json.loads(args) if isinstance(args, str) else args
        jsonschema.validate(args, WEATHER["function"]["parameters"])
        assert args["city"] in raw  # the arguments came from the output, not from elsewhere
    # every marker the grammar writes came out as that one special token (but an
    # end-of-generation one, gpt-oss's `<|call|>`, which ends the output unseen), and the call
    # is more than its markers: the rest of its markup is ordinary pieces
    ends = end_of_generation(engine, ids.values())
    forced_marks = {tok for tok in ids.values() if f"<[{tok}]>" in grammar} - ends
    assert forced_marks <= set(tokens), (forced_marks, raw)
    assert len([t for t in tokens if t not in ids.values()]) > 1
    again = parse_all_ways(raw, family=family, start=start, tools=list(TOOLS))
    assert [(c.name, c.arguments) for c in again.tool_calls] == calls, raw
