"""app/config.py: the context one request gets and the KV layout, from the command line, the
pack and the machine, as `prism` and `prism serve` print them at start (real default GGUF's
metadata; nothing is loaded)."""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from app.config import add_engine_arguments, context_size
from engine.chat.packs import load_pack

ROOT = Path(__file__).resolve().parents[2]


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


def test_the_family_flag_and_its_former_name():
    assert args().family is None  # the pack's, or the template's
    assert args("--family", "glm").family == "glm"
    assert args("--dialect", "glm").family == "glm"  # scripts written before the rename
    p = argparse.ArgumentParser()
    add_engine_arguments(p)
    assert "--family" in p.format_help() and "--dialect" not in p.format_help()
    with pytest.raises(SystemExit):
        args("--dialect", "yaml")


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


# -- --template without --upstream: the local model renders with it --------------------------

CUSTOM = ("{%- for m in messages %}<|im_start|>{{ m.role }}\nPRISM-CUSTOM {{ m.content }}"
          "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n"
          "{% endif %}")


def test_template_replaces_the_local_pack_s_own(tmp_path: Path):
    from app.config import resolve
    from engine.chat.request import Message

    path = tmp_path / "custom.jinja"
    path.write_text(CUSTOM, encoding="utf-8")
    default = load_pack("smollm2")
    pack = resolve(args("--template", str(path)))
    assert (pack.template, pack.template_origin, pack.gguf) == (CUSTOM, str(path), default.gguf)
    assert pack.chat_template().render((Message("user", "Hi"),)) == \
        "<|im_start|>user\nPRISM-CUSTOM Hi<|im_end|>\n<|im_start|>assistant\n"
    # No --pack: the family is the template's own (it marks none); with --pack, the pack's.
    assert (pack.family, pack.family_origin) == ("auto", "no family marker in the chat template")
    kept = resolve(args("--pack", "smollm2", "--template", str(path)))
    assert (kept.template, kept.family) == (CUSTOM, default.family)


def test_a_template_that_cannot_be_used_stops_start_up_naming_the_file(tmp_path: Path):
    from app.config import resolve

    bad = tmp_path / "bad.jinja"
    bad.write_text("{% for m in messages %}\n{{ m.content }}\n{{ nope() }}{% endfor %}",
                   encoding="utf-8")
    with pytest.raises(SystemExit, match=re.escape(
            f"prism: the chat template ({bad}) fails on a one-message conversation: line 3: "
            "'nope' is undefined\n     3 | {{ nope() }}")):
        resolve(args("--template", str(bad)))
    broken = tmp_path / "broken.jinja"
    broken.write_text("{% for m in messages %}\n{{ m.content }\n", encoding="utf-8")
    with pytest.raises(SystemExit, match=re.escape(
            f"prism: the chat template ({broken}) does not compile: line 2: ")):
        resolve(args("--template", str(broken)))
    with pytest.raises(SystemExit, match=r"^prism: cannot read --template "):
        resolve(args("--template", str(tmp_path / "missing.jinja")))


def _serve(*argv: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("PRISM_API_KEY", None)
    return subprocess.Popen([sys.executable, "-m", "app", "serve", *argv], cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def test_prism_serve_with_a_bad_template_and_no_upstream_refuses_to_start(tmp_path: Path):
    bad = tmp_path / "bad.jinja"
    bad.write_text("{{ messages[0].content | nosuchfilter }}", encoding="utf-8")
    proc = _serve("--template", str(bad), "--port", "0", "--no-record")
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 1
    assert f"prism: the chat template ({bad}) does not compile: line 1: No filter named " \
        "'nosuchfilter'." in err
    assert "serving" not in err and "Traceback" not in err


@pytest.mark.model
def test_prism_serve_renders_with_the_template_on_the_local_model(default_model, tmp_path):
    from tests.engine.backends.upstream.scripted_upstream import free_port
    from tests.support import wait_healthy

    path = tmp_path / "custom.jinja"
    path.write_text(CUSTOM, encoding="utf-8")
    port, record = free_port(), tmp_path / "rec.jsonl"
    proc = _serve("--template", str(path), "--port", str(port), "--record-to", str(record),
                  "--n-ctx", "512", "--parallel", "1", "--threads", "1")
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60) as http:
            wait_healthy(http, proc, 120)
            assert http.get("/props").json()["chat_template"] == CUSTOM
            ok = http.post("/v1/chat/completions", json={
                "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2})
        assert ok.status_code == 200
    finally:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=30)
    from engine.record.reader import read_session

    (req,) = read_session(record).requests
    assert req.prompt == "<|im_start|>user\nPRISM-CUSTOM Hi<|im_end|>\n<|im_start|>assistant\n"
