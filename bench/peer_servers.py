"""The peers bench/peers.py compares, and how each is asked (issue 23): `PrismPeer` (`prism
serve`), `LlamaServerPeer` (llama.cpp's `llama-server`), both read by one streaming client
(`stream_chat`, a `Reply` per request), and `RawPeer`, which talks to bench/raw_peer.py's worker
process. Each peer is its own process, so its CPU time can be read from /proc. Not part of the
test suite; bench/peers.py's docstring says how each is configured and why.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench.common import ROOT, free_port, wait_http

TEMPLATE = ROOT / "resources" / "templates" / "smollm2.jinja"


# --- one streamed request ------------------------------------------------------------------------


@dataclass
class Reply:
    t0: float  # when the request was sent (perf_counter: CLOCK_MONOTONIC, shared by processes)
    stamps: list[float] = field(default_factory=list)  # chunks that carried output
    end: float = 0.0
    n: int = 0  # completion tokens (the server's usage)
    prompt_tokens: int = 0
    text: str = ""
    calls: list[str] = field(default_factory=list)

    @property
    def ttft_ms(self) -> float:
        return (self.stamps[0] - self.t0) * 1000.0 if self.stamps else float("nan")

    @property
    def tps(self) -> float:
        span = (self.stamps[-1] - self.stamps[0]) if len(self.stamps) > 1 else 0.0
        return (self.n - 1) / span if span > 0 and self.n > 1 else float("nan")

    @property
    def total_s(self) -> float:
        return self.end - self.t0


def stream_chat(url: str, body: dict, timeout: float = 1800.0) -> Reply:
    import httpx

    body = {"model": "smollm2", "stream": True, "stream_options": {"include_usage": True},
            "temperature": 0.0, "seed": 1, **body}
    reply = Reply(time.perf_counter())
    text: list[str] = []
    with httpx.Client(timeout=timeout) as http, http.stream(
            "POST", url + "/v1/chat/completions", json=body) as resp:
        if resp.status_code != 200:
            raise RuntimeError(f"{url}: {resp.status_code} {resp.read()[:500]!r}")
        for line in resp.iter_lines():
            if not line.startswith("data: {"):
                continue
            chunk = json.loads(line[6:])
            if chunk.get("usage"):
                reply.n = chunk["usage"].get("completion_tokens", 0)
                reply.prompt_tokens = chunk["usage"].get("prompt_tokens", 0)
            for choice in chunk.get("choices") or ():
                delta = choice.get("delta") or {}
                if delta.get("content") or delta.get("reasoning_content") or \
                        delta.get("tool_calls"):
                    reply.stamps.append(time.perf_counter())
                text.append(delta.get("content") or "")
                for call in delta.get("tool_calls") or ():
                    name = (call.get("function") or {}).get("name")
                    if name:
                        reply.calls.append(name)
    reply.end = time.perf_counter()
    reply.text = "".join(text)
    return reply


# --- peers ---------------------------------------------------------------------------------------


class ServerPeer:
    name = "?"
    proc: subprocess.Popen
    url: str

    def chat(self, body: dict) -> Reply:
        return stream_chat(self.url, body)

    def chats(self, bodies: list[dict]) -> list[Reply]:
        out: list[Reply | None] = [None] * len(bodies)

        def one(i: int) -> None:
            out[i] = self.chat(bodies[i])

        threads = [threading.Thread(target=one, args=(i,)) for i in range(len(bodies))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if any(r is None for r in out):
            raise RuntimeError(f"{self.name}: a concurrent request failed")
        return out  # type: ignore[return-value]

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


class PrismPeer(ServerPeer):
    def __init__(self, parallel: int, n_ctx: int, threads: int, log: Path,
                 name: str = "prism", extra: tuple[str, ...] = (),
                 env: dict[str, str] | None = None) -> None:
        self.name = name
        port = free_port()
        args = ["serve", "--pack", "smollm2", "--port", str(port), "--n-ctx", str(n_ctx),
                "--parallel", str(parallel), "--threads", str(threads), "--no-record",
                "--log-level", "warning", *extra]
        cmd = [sys.executable, "-m", "app", *args]
        # A fresh cache folder: the disk prompt cache starts empty, as llama-server's RAM one.
        env = {**os.environ, "XDG_CACHE_HOME": tempfile.mkdtemp(prefix="prism-peers-cache-"),
               **(env or {})}
        with log.open("w") as out:
            self.proc = subprocess.Popen(cmd, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
                                         env=env)
        self.url = f"http://127.0.0.1:{port}"
        wait_http(self.url + "/health", self.proc, timeout=300)


class LlamaServerPeer(ServerPeer):
    def __init__(self, binary: Path, gguf: Path, parallel: int, n_ctx: int, threads: int,
                 log: Path, name: str = "server", extra: tuple[str, ...] = ()) -> None:
        self.name = name
        port = free_port()
        cmd = [str(binary), "-m", str(gguf), "--host", "127.0.0.1", "--port", str(port),
               "--jinja", "--chat-template-file", str(TEMPLATE), "-np", str(parallel),
               "-c", str(n_ctx * parallel), "-t", str(threads), "-tb", str(threads),
               "--no-webui", *extra]
        with log.open("w") as out:
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
        self.url = f"http://127.0.0.1:{port}"
        wait_http(self.url + "/health", self.proc, timeout=300)


class RawPeer:
    """The worker process (`--worker`): one JSON request a line in, one JSON answer out."""

    name = "raw"

    def __init__(self, parallel: int, n_ctx: int, threads: int, log: Path) -> None:
        from engine.chat.packs import resolve_pack

        self.pack = resolve_pack("smollm2")
        with log.open("w") as err:
            self.proc = subprocess.Popen(
                [sys.executable, str(ROOT / "bench" / "raw_peer.py"), "--parallel", str(parallel),
                 "--n-ctx", str(n_ctx), "--threads", str(threads)],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, text=True)
        line = self.proc.stdout.readline()
        if not line:
            raise SystemExit(f"raw worker did not start: {log.read_text()[-2000:]}")
        assert json.loads(line)["ready"]

    def render(self, body: dict) -> str:
        from engine.chat.request import Message

        msgs = tuple(Message(m["role"], m["content"]) for m in body["messages"])
        return self.pack.chat_template().render(msgs, tools=body.get("tools", ()),
                                                add_generation_prompt=True,
                                                enable_thinking=self.pack.thinking)

    def chats(self, bodies: list[dict]) -> list[Reply]:
        t0 = time.perf_counter()
        req = {"prompts": [self.render(b) for b in bodies],
               "max_tokens": [b.get("max_tokens", 128) for b in bodies]}
        self.proc.stdin.write(json.dumps(req) + "\n")
        self.proc.stdin.flush()
        res = json.loads(self.proc.stdout.readline())
        return [Reply(t0, s["times"], s["times"][-1] if s["times"] else t0, len(s["times"]),
                      s["prompt_tokens"], s["text"]) for s in res["seqs"]]

    def chat(self, body: dict) -> Reply:
        return self.chats([body])[0]

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(30)
