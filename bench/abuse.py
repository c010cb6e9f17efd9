"""Abuse bench: the worst inputs of issue 10 replayed against a live server. For each it prints
the HTTP status, how long the request took, and how long /health stalled meanwhile (the
longest single /health answer while the request was in flight: on a server that tokenizes or
renders on its event loop, that is the whole request). Not part of the test suite.

    python bench/abuse.py                 # starts `prism serve --port 0` on the default model
    python bench/abuse.py --url http://127.0.0.1:8421 [--api-key KEY]   # an existing server
    python bench/abuse.py --only 8mib,ghost --timeout 60

Cases (each needs only a server; the special token is the default model's ChatML `<|im_start|>`):
  8mib        a user message of 8 MiB of special tokens (the body limit is 8 MiB)
  1.9mb       1.9 MB of special tokens (froze every endpoint for 43 s in the report)
  5mb-turns   5 MB of one-word ChatML turns in one message (over 5 minutes in the report)
  surrogate   a lone surrogate in `model` (left a ghost request "running" in the metrics)
  deep        JSON nested 1,000 levels deep (a RecursionError 500, then a reset connection)
  nan         Responses with temperature NaN, streamed (generated, then a 500 and bare NaN)
  enum        a response_format schema {"enum": []} (an "invalid GBNF grammar" 500)
  text-plain  a text/plain POST, as any web page can send (executed before)
  rebind      a foreign Host header, as DNS rebinding sends (served before)
  half-open   a connection that sends half a request head: seconds until the server closes it
  hangup      a client that leaves during a long prompt: seconds until the engine is idle
After the cases: whether the metrics count any request as still running (ghosts).

Runs on the main thread; a `HealthWatch` thread polls /health meanwhile, and the server is
its own process unless `--url` names one.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
SPECIAL = "<|im_start|>"
JSON = {"content-type": "application/json"}


class HealthWatch:
    """Polls /health on its own connection; `stall()` is the longest answer since `reset()`."""

    def __init__(self, url: str, headers: dict) -> None:
        self.http = httpx.Client(base_url=url, headers=headers, timeout=600)
        self.worst = 0.0
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.is_set():
            t0 = time.perf_counter()
            with contextlib.suppress(httpx.HTTPError):
                self.http.get("/health")
            took = time.perf_counter() - t0
            with self.lock:
                self.worst = max(self.worst, took)
            time.sleep(0.02)

    def reset(self) -> None:
        with self.lock:
            self.worst = 0.0

    def stall(self) -> float:
        with self.lock:
            return self.worst

    def close(self) -> None:
        self.stop.set()
        self.thread.join(5)
        self.http.close()


def chat_body(content: str, **extra) -> bytes:
    return json.dumps({"model": "m", "max_tokens": 8, "messages": [
        {"role": "user", "content": content}], **extra}).encode()


def sized(unit: str, n_bytes: int, limit: int | None = None) -> str:
    """`unit` repeated to about n_bytes, kept under `limit` bytes of JSON body."""
    text = unit * (n_bytes // len(unit))
    if limit is not None:
        over = len(chat_body(text)) - limit
        if over > 0:
            text = text[: len(text) - over - len(unit)]
    return text


def post_case(body: bytes, path: str = "/v1/chat/completions", headers: dict | None = None):
    def run(http: httpx.Client) -> str:
        r = http.post(path, content=body, headers=headers or JSON)
        if r.headers.get("content-type", "").startswith("text/event-stream"):
            tail = r.text[-200:].replace("\n", " ")
            return f"{r.status_code} (stream ends: ...{tail[-60:]})"
        return str(r.status_code)
    return run


def half_open(url: str) -> str:
    host, port = re.match(r"https?://([^:/]+):(\d+)", url).groups()
    t0 = time.perf_counter()
    with socket.create_connection((host, int(port))) as s:
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        s.settimeout(60)
        try:
            data = s.recv(1024)
        except TimeoutError:
            return "still open after 60 s"
    return f"closed by the server after {time.perf_counter() - t0:.1f} s ({len(data)} bytes)"


def hangup(http: httpx.Client) -> str:
    """Stream a long prompt, leave before the first token, time until nothing is in flight."""
    text = " ".join(f"word{i}" for i in range(1200))
    with http.stream("POST", "/v1/chat/completions", content=chat_body(text, stream=True),
                     headers=JSON, timeout=2) as r:
        time.sleep(0.3)  # the prompt is being decoded now
        status = r.status_code
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < 60:
        live = http.get("/metrics", params={"format": "json"}).json()["live"]
        if not live["in_flight"]:
            return f"{status}; engine idle {time.perf_counter() - t0:.2f} s after the hangup"
        time.sleep(0.02)
    return f"{status}; engine still busy 60 s after the hangup"


def cases(limit: int) -> dict:
    deep = b'{"model": "m", "messages": ' + b"[" * 1000 + b"1" + b"]" * 1000 + b"}"
    turns = "<|im_start|>user\nhi<|im_end|>\n"
    return {
        "8mib": post_case(chat_body(sized(SPECIAL, 8 << 20, limit))),
        "1.9mb": post_case(chat_body(sized(SPECIAL, 1_900_000))),
        "5mb-turns": post_case(chat_body(sized(turns, 5_000_000))),
        "surrogate": post_case(b'{"model": "\\ud800", "max_tokens": 4, "messages": '
                               b'[{"role": "user", "content": "hi"}]}'),
        "deep": post_case(deep),
        "nan": post_case(b'{"model": "m", "input": "hi", "max_output_tokens": 8, '
                         b'"stream": true, "temperature": NaN}', "/v1/responses"),
        "enum": post_case(chat_body("hi", response_format={"type": "json_schema", "json_schema": {
            "name": "x", "schema": {"enum": []}}})),
        "text-plain": post_case(chat_body("hi"), headers={"content-type": "text/plain"}),
        "rebind": post_case(chat_body("hi"), headers={**JSON, "host": "rebind.evil.example"}),
        "hangup": hangup,
    }


def start_server(args) -> tuple[subprocess.Popen, str]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("PRISM_API_KEY", None)
    cmd = [sys.executable, "-m", "app", "serve", "--port", "0", "--no-record",
           "--log-level", "warning", *args.serve_args]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    for line in proc.stdout:
        found = re.search(r"(http://[\d.]+:\d+)/v1", line)
        if found:
            threading.Thread(target=lambda: [None for _ in proc.stdout], daemon=True).start()
            return proc, found.group(1)
    raise SystemExit(f"the server did not start (exit {proc.wait()})")


def wait_healthy(http: httpx.Client) -> None:
    for _ in range(600):
        try:
            if http.get("/health").status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    raise SystemExit("the server never became healthy")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--url", help="an already running server (default: start one)")
    p.add_argument("--api-key", default="")
    p.add_argument("--only", help="comma-separated case names (default: all)")
    p.add_argument("--timeout", type=float, default=300.0, help="per request, seconds")
    p.add_argument("--max-body", type=int, default=8 << 20,
                   help="the server's body limit, to size the 8 MiB case under it")
    p.add_argument("serve_args", nargs="*", help="extra `prism serve` arguments (after --)")
    args = p.parse_args()
    proc = None
    url = args.url
    if url is None:
        proc, url = start_server(args)
    headers = {"authorization": f"Bearer {args.api_key}"} if args.api_key else {}
    http = httpx.Client(base_url=url, headers=headers, timeout=args.timeout)
    try:
        wait_healthy(http)
        watch = HealthWatch(url, headers)
        chosen = cases(args.max_body)
        names = args.only.split(",") if args.only else [*chosen, "half-open"]
        print(f"server {url}\n{'case':<12} {'request s':>9} {'/health stall ms':>16}  status")
        for name in names:
            watch.reset()
            t0 = time.perf_counter()
            try:
                status = half_open(url) if name == "half-open" else chosen[name](http)
            except httpx.HTTPError as e:
                status = f"{type(e).__name__}: {e}"
            took = time.perf_counter() - t0
            print(f"{name:<12} {took:>9.2f} {watch.stall() * 1000:>16.0f}  {status}",
                  flush=True)
        time.sleep(0.5)
        live = http.get("/metrics", params={"format": "json"}).json()["live"]
        print(f"after the cases: {live['in_flight']} request(s) still counted in flight")
        watch.close()
    finally:
        http.close()
        if proc is not None:
            proc.terminate()
            proc.wait(30)


if __name__ == "__main__":
    main()
