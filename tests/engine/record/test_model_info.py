"""engine/record/model_info.py: what generated a recording, from a pack, and from a header."""

from __future__ import annotations

from engine.chat.packs import load_pack, resolve_pack
from engine.record.model_info import LOCAL, UNKNOWN, ModelInfo, describe, template_hash


def test_a_pack_with_its_gguf_is_described_fully(default_model):
    info = describe(load_pack("smollm2"), LOCAL)
    assert info.file == default_model.name and info.family == "hermes-json"
    assert info.quant != UNKNOWN and info.quant in default_model.name
    assert info.engine == LOCAL and len(info.template) == 12
    assert ModelInfo.from_header({"model_info": info.to_dict()}) == info


def test_templates_are_told_apart_by_their_hash():
    qwen = resolve_pack("qwen3-xml", require_model=False)
    assert template_hash(qwen) == template_hash(qwen)
    assert template_hash(qwen) != template_hash(load_pack("smollm2"))


def test_a_header_without_model_info_says_unknown_but_what_it_had():
    old = ModelInfo.from_header({"model": "qwen", "upstream": "http://h:1/v1"})
    assert old == ModelInfo(file="qwen", engine="http://h:1/v1")
    assert ModelInfo.from_header({}) == ModelInfo()
    assert ModelInfo().quant == UNKNOWN
