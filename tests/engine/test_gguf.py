"""engine/gguf.py: metadata read from a real GGUF, and `general.file_type` named."""

from __future__ import annotations

from engine.gguf import FILE_TYPES, quant_name, read_gguf_metadata


def test_the_default_models_quant_is_named_as_its_file_says(default_model):
    meta = read_gguf_metadata(default_model)
    name = quant_name(meta.get("general.file_type"))
    assert name in FILE_TYPES.values()
    # the file's name carries its quant (SmolLM2-135M-Instruct.Q4_1.gguf): they must agree
    assert default_model.stem.upper().endswith(name)


def test_unknown_values_say_so():
    assert quant_name(None) == "unknown" and quant_name("Q4") == "unknown"
    assert quant_name(True) == "unknown"  # a bool is not a file type, though an int
    assert quant_name(999) == "type 999"
    assert quant_name(15) == "Q4_K_M" and quant_name(32) == "BF16"
