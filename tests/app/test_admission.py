"""app/api/admission.py: `--max-queue` holds under a burst, on every route.

A real `prism serve` process (the default model, `--parallel 1 --max-queue 2`): one long
completion takes the only sequence, then four times `--max-queue` requests arrive at once on one
route (chat, Responses, Messages, completions, and all four mixed). Exactly `--max-queue` of
them wait (the server's `prism_requests_waiting`), every other one is a 429 with Retry-After,
and once the long one leaves, each waiting one is answered 200. The count used to be read before
a request was rendered and queued, so a burst went through whole.

`--tap` the same way, in front of a scripted upstream that holds every request it gets: the
limit there counts the requests in flight at the upstream.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator

import httpx
import pytest

from app.api.tap import TapEngine
from engine.backends.upstream.engine import UpstreamEngine
from engine.chat.packs import resolve_pack
from tests.engine.backends.upstream.scripted_upstream import Reply, ScriptedUpstream, Seen
from tests.support import ROOT, wait_healthy, wait_until

MAX_QUEUE = 2
BURST = 4 * MAX_QUEUE
HI = [{"role": "user", "content": "Say hi."}]
ROUTES = {
    "chat": ("/v1/chat/completions", {"messages": HI, "max_tokens": 4}),
    "responses": ("/v1/responses", {"input": "Say hi.", "max_output_tokens": 4}),
    "messages": ("/v1/messages", {"model": "m", "messages": HI, "max_tokens": 4}),
    "completions": ("/v1/completions", {"prompt": "Say hi.", "max_tokens": 4}),
}
# Greedy counting: the model goes on for the whole max_tokens, holding the one sequence.
LONG = {"prompt": "1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12,", "max_tokens": 3000,
        "temperature": 0, "stream": True}


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server(default_model) -> Iterator[str]:
    port = _free_port()
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("PRISM_API_KEY", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "app", "serve", "--port", str(port), "--no-record",
         "--parallel", "1", "--max-queue", str(MAX_QUEUE), "--log-level", "warning"],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        with httpx.Client(base_url=url, timeout=60) as http:
            wait_healthy(http, proc, 180)
        yield url
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def waiting(http: httpx.Client) -> int:
    """The server's own count of requests queued for the engine (/metrics)."""
    text = http.get("/metrics").text
    m = re.search(r"^prism_requests_waiting\{[^}]*\} (\S+)$", text, re.M)
    assert m, "no prism_requests_waiting in /metrics"
    return int(float(m[1]))


class Burst:
    """Requests sent at once from threads (released together by a barrier); each one's status
    and Retry-After header as they come."""

    def __init__(self, url: str, requests: list[tuple[str, dict]]) -> None:
        self.answers: list[tuple[int, str | None]] = []
        self._lock = threading.Lock()
        self._gate = threading.Barrier(len(requests))
        self.threads = [threading.Thread(target=self._send, args=(url, path, body), daemon=True)
                        for path, body in requests]
        for t in self.threads:
            t.start()

    def _send(self, url: str, path: str, body: dict) -> None:
        with httpx.Client(base_url=url, timeout=120) as client:
            self._gate.wait()
            with client.stream("POST", path, json={**body, "stream": True}) as r:
                with self._lock:
                    self.answers.append((r.status_code, r.headers.get("retry-after")))
                for _ in r.iter_bytes():  # a waiting one is answered once the long one leaves
                    pass

    @property
    def refused(self) -> list[str | None]:
        with self._lock:
            return [after for status, after in self.answers if status == 429]

    def join(self) -> list[int]:
        for t in self.threads:
            t.join(120)
            assert not t.is_alive(), "a request of the burst never ended"
        return sorted(status for status, _ in self.answers)


def burst_against_a_busy_sequence(url: str, requests: list[tuple[str, dict]]) -> None:
    assert len(requests) == BURST
    with httpx.Client(base_url=url, timeout=120) as http:
        with http.stream("POST", "/v1/completions", json=LONG) as long:
            lines = long.iter_lines()
            assert long.status_code == 200
            next(line for line in lines if line.startswith("data: "))  # it is generating
            burst = Burst(url, requests)
            wait_until(lambda: len(burst.refused) + waiting(http) >= BURST, 60, 0.05,
                       "every request of the burst to be refused or queued")
            refused = burst.refused
            assert len(refused) == BURST - MAX_QUEUE, burst.answers
            assert waiting(http) == MAX_QUEUE
            assert all(after is not None and int(after) >= 1 for after in refused)
            # The long one was still generating all along: nothing of the burst ran yet.
            assert '"finish_reason":null' in next(ln for ln in lines if ln.startswith("data: "))
        # It left: the waiting ones run, one after the other.
        assert burst.join() == [200] * MAX_QUEUE + [429] * (BURST - MAX_QUEUE)
        assert waiting(http) == 0


@pytest.mark.model
@pytest.mark.parametrize("route", list(ROUTES))
def test_a_burst_gets_exactly_max_queue_places(server, route):
    burst_against_a_busy_sequence(server, [ROUTES[route]] * BURST)


@pytest.mark.model
def test_a_burst_across_all_routes_shares_one_count(server):
    burst_against_a_busy_sequence(server, list(ROUTES.values()) * (BURST // len(ROUTES)))


# --- --tap ---------------------------------------------------------------------------------------


def test_tap_admits_max_queue_requests_of_a_burst(serve_upstream):
    release = threading.Event()
    held: list[Seen] = []

    async def hold(req: Seen, reply: Reply) -> None:
        held.append(req)
        await reply.start_stream()
        while not release.is_set():
            await asyncio.sleep(0.02)
        await reply.event('{"choices":[{"index":0,"delta":{"content":"ok"},'
                          '"finish_reason":"stop"}]}')
        await reply.event("[DONE]")
        await reply.end_stream()

    with ScriptedUpstream(hold) as up:
        engine = TapEngine(UpstreamEngine(up.url))
        assert engine.ready.wait(10)
        live = serve_upstream(engine, resolve_pack("qwen3-xml", require_model=False),
                              max_queue=MAX_QUEUE)
        burst = Burst(live.url, [ROUTES["chat"]] * BURST)
        try:
            wait_until(lambda: len(burst.refused) + len(held) >= BURST, 30, 0.02,
                       "every request of the burst to be refused or forwarded")
            assert len(held) == MAX_QUEUE and len(burst.refused) == BURST - MAX_QUEUE
            assert all(after is not None and int(after) >= 1 for after in burst.refused)
        finally:
            release.set()
        assert burst.join() == [200] * MAX_QUEUE + [429] * (BURST - MAX_QUEUE)
