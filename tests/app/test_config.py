"""app/config.py: the context one request gets and the KV layout, from the command line, the
pack and the machine, as `prism` and `prism serve` print them at start (real default GGUF's
metadata; nothing is loaded)."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from app.config import add_engine_arguments, context_size
from engine.chat.packs import load_pack


def args(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    add_engine_arguments(p)
    return p.parse_args(list(argv))


def test_the_trained_context_and_split_caches_by_default(default_model: Path, capsys):
    pack = load_pack("smollm2")
    assert pack.n_ctx is None  # built-in packs leave the context to backends/llama/kv_plan.py
    assert context_size(args(), pack) == (8192, False)
    err = capsys.readouterr().err
    assert "prism: context 8192 tokens, the model's trained context" in err
    assert "prism: 4 parallel sequences, one KV cache per sequence: 4 caches of 180 MiB fit" \
        in err


def test_n_ctx_then_the_pack_s_own_then_the_plan(default_model: Path, capsys):
    pack = dataclasses.replace(load_pack("smollm2"), n_ctx=1024, name="mine")
    assert context_size(args(), pack)[0] == 1024
    assert "prism: context 1024 tokens (pack mine)" in capsys.readouterr().err
    assert context_size(args("--n-ctx", "512"), pack)[0] == 512
    assert "prism: context 512 tokens (--n-ctx)" in capsys.readouterr().err


def test_the_layout_flag_and_one_sequence(default_model: Path, capsys):
    pack = load_pack("smollm2")
    assert context_size(args("--kv-layout", "unified"), pack) == (8192, True)
    assert "one KV pool shared by the sequences: --kv-layout unified" in capsys.readouterr().err
    assert context_size(args("--parallel", "1"), pack) == (8192, True)
    assert "parallel sequences" not in capsys.readouterr().err


def test_the_speculate_flag():
    p = argparse.ArgumentParser()
    add_engine_arguments(p)
    assert p.parse_args([]).speculate == "off"
    assert p.parse_args(["--speculate", "ngram"]).speculate == "ngram"


def test_no_guard_calls_turns_the_services_default_off(tmp_path: Path):
    from app import serve as serve_verb
    from app.config import build_service

    out = tmp_path / "out.txt"
    out.write_text("Hello.", encoding="utf-8")
    p = argparse.ArgumentParser()
    serve_verb.add_arguments(p)
    for extra, on in (((), True), (("--no-guard-calls",), False)):
        service = build_service(p.parse_args(["--replay", str(out), "--no-record", *extra]))
        try:
            assert service.guard_calls is on  # a request's own guard_calls still wins
        finally:
            service.engine.close()


def test_the_flash_attention_flag():
    p = argparse.ArgumentParser()
    add_engine_arguments(p)
    assert p.parse_args([]).flash_attn == "auto"  # as llama-server's -fa
    assert p.parse_args(["--flash-attn", "off"]).flash_attn == "off"
