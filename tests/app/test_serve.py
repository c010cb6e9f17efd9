"""app/serve.py: the `prism serve` verb refuses a non-loopback address without a key (before
loading anything), and serves a replay end to end as a real process."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from app.serve import check_host, is_loopback
from tests.support import wait_healthy

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(("host", "loopback"), [
    ("127.0.0.1", True), ("127.0.0.2", True), ("::1", True), ("[::1]", True),
    ("localhost", True), ("0.0.0.0", False), ("::", False), ("192.168.1.5", False),
    ("myhost.example", False),
])
def test_is_loopback(host, loopback):
    assert is_loopback(host) is loopback


def test_check_host_needs_a_key_off_loopback():
    check_host("127.0.0.1", None)
    check_host("0.0.0.0", "key")
    with pytest.raises(SystemExit) as err:
        check_host("0.0.0.0", None)
    assert "without --api-key" in str(err.value) and "127.0.0.1" in str(err.value)


def _prism(*args: str, **kw) -> subprocess.Popen:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("PRISM_API_KEY", None)
    return subprocess.Popen([sys.executable, "-m", "app", *args], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kw)


def test_refuses_to_start_on_all_interfaces_without_key(tmp_path):
    out = tmp_path / "out.txt"
    out.write_text("x")
    proc = _prism("serve", "--host", "0.0.0.0", "--replay", str(out), "--no-record")
    text, _ = proc.communicate(timeout=60)
    assert proc.returncode != 0
    assert "refusing to listen on 0.0.0.0 without --api-key" in text


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_serves_a_replay_as_a_process(tmp_path):
    out = tmp_path / "out.txt"
    out.write_text("Thinking it over.\n</think>\n\nHello from a replay.")
    port = _free_port()
    proc = _prism("serve", "--replay", str(out), "--port", str(port), "--no-record",
                  "--reasoning-field", "both", "--log-level", "warning")
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10) as http:
            wait_healthy(http, proc, 60)
            msg = http.post("/v1/chat/completions", json={
                "messages": [{"role": "user", "content": "hi"}]}).json()["choices"][0]["message"]
        assert msg["content"] == "Hello from a replay."
        assert msg["reasoning_content"] == msg["reasoning"] == "Thinking it over."
    finally:
        proc.send_signal(signal.SIGINT)
        text, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0, text
    assert f"http://127.0.0.1:{port}/v1" in text


@pytest.mark.model
def test_a_real_model_leaves_the_terminal_its_lines(default_model):
    # With a GGUF, llama-cpp-python used to silence the whole process while the model loaded
    # on the engine thread, and the banner and uvicorn's handlers were set up on the silenced
    # streams: nothing ever showed (issue 9, item 2). stderr carries all of it now.
    port = _free_port()
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("PRISM_API_KEY", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "app", "serve", "--port", str(port), "--no-record",
         "--max-tokens", "8"],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60) as http:
            wait_healthy(http, proc, 120)
            # 100000 > the context: clamped (--max-tokens 8), not refused (issue 9, items 5, 7)
            ok = http.post("/v1/chat/completions", json={
                "messages": [{"role": "user", "content": "hi"}], "max_tokens": 100000})
            bad = http.post("/v1/messages", json={"model": "m", "max_tokens": 5,
                                                  "messages": []})
        assert ok.status_code == 200 and bad.status_code == 400
        assert ok.json()["usage"]["completion_tokens"] <= 8
    finally:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    assert f"prism: serving SmolLM2-135M-Instruct.Q4_1 (smollm2) on http://127.0.0.1:{port}/v1" \
        in err
    assert '"POST /v1/chat/completions HTTP/1.1" 200' in err
    # The default context: the model's trained one, said at start.
    assert "prism: context 8192 tokens, the model's trained context; its KV cache takes " \
        "180 MiB" in err
    # --parallel 4 (the default): four caches of the whole context fit a quarter of the memory
    # on any machine with 2.9 GiB or more, so each sequence gets its own
    # (engine/backends/llama/kv_plan.py).
    assert "prism: 4 parallel sequences, one KV cache per sequence: 4 caches of 180 MiB fit " \
        "the memory budget of" in err
    assert "[prism] context: 8192 tokens for each of 4 sequences (split KV caches, 720 MiB)" \
        in err
    reason = bad.json()["error"]["message"]
    assert f"[prism] anthropic /v1/messages 400 invalid_request_error: {reason}" in err


def test_two_instances_keep_both_recordings_in_a_private_folder(tmp_path):
    # `prism serve` without --record-to records into the user data folder. Two instances
    # started together used to open the same file (named after the second) with "w", and the
    # folder was left readable by everyone (issue 10, item 4).
    out = tmp_path / "out.txt"
    out.write_text("Hello.")
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "XDG_DATA_HOME": str(tmp_path / "data")}
    env.pop("PRISM_API_KEY", None)
    ports = [_free_port(), _free_port()]
    procs = [subprocess.Popen([sys.executable, "-m", "app", "serve", "--replay", str(out),
                               "--port", str(port), "--log-level", "warning"],
                              cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True) for port in ports]
    try:
        for proc, port in zip(procs, ports, strict=True):
            with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10) as http:
                wait_healthy(http, proc, 60)
                for word in ("one", "two"):
                    r = http.post("/v1/chat/completions", json={
                        "messages": [{"role": "user", "content": f"{word} {port}"}]})
                    assert r.status_code == 200
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGINT)
        errs = [proc.communicate(timeout=30)[1] for proc in procs]
    assert [proc.returncode for proc in procs] == [0, 0], errs
    folder = tmp_path / "data" / "prism" / "sessions"
    files = sorted(folder.iterdir())
    assert len(files) == 2
    asked = [[json.loads(line)["request"]["messages"][0]["content"]
              for line in f.read_text().splitlines() if '"type": "request"' in line]
             for f in files]
    assert sorted(asked) == sorted([[f"one {p}", f"two {p}"] for p in ports])
    assert folder.stat().st_mode & 0o777 == 0o700
    assert {f.stat().st_mode & 0o777 for f in files} == {0o600}
