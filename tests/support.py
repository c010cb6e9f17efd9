"""Helpers the test packages share (fixtures built on them live in tests/conftest.py).

- `recorded_failures()`: the four real outputs where a Qwen model wrote its call inside its
  thinking (tests/fixtures/recorded_tool_call_in_thinking.json, the one copy).
- `wait_until()` / `until()`: poll a condition against a deadline, blocking or in an asyncio
  loop, failing with what was awaited; `wait_healthy()`: a server process up (GET /health).
- `Clock`: a clock the test moves by hand (or the replay engine moves by pausing), for the
  engines and models that take one.
"""

from __future__ import annotations

import asyncio
import json
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
