"""Metrics: counters, a per-request log, a live view and chart series, for GUI and server.

Owns `Metrics`. It is written from the engine thread (tokens, anomalies, finishes) and read
from the server and GUI threads, so all state sits behind one lock and every read returns
plain copies (`snapshot()`, `series()`). Observers (e.g. a Prometheus exporter in app/api) are
called on the writer's thread, outside the lock; an observer that raises is logged and
otherwise ignored, so it can never stall generation.

Times are time.perf_counter() values; series x values are seconds since the Metrics object was
created (float, ready for pyqtgraph). Live tokens/s counts the tokens of the last `window`
seconds: (n - 1) / (now - oldest), so it is right from the second token, follows a running
generation, and decays to 0 once tokens stop.

Logging (logger "prism"): one line per implicit end of thinking and per repaired call, and one
summary per request:
    [prism] implicit end of thinking: <id> <first 80 chars of the reasoning tail...>
    [prism] repaired call: <id> <what was repaired, e.g. "missing </parameter>">
    [prism] invalid arguments: <id> <what failed, where, e.g. "/units: 'units' is a required ...">
    [prism] <id> <api> <finish> prompt=N out=N ttft=Xms tps=Y anomalies=...
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from engine.backends.base import Engine, Timings
from engine.parse.events import (
    ANOMALY_KINDS,
    EXTRA_TOOL_CALL,
    IMPLICIT_REASONING_END,
    INVALID_ARGUMENTS,
    REPAIRED_CALL,
)

log = logging.getLogger("prism")

SERIES = ("tokens_per_s", "ttft_ms", "queue_depth", "busy_slots", "draft_kept_pct",
          *(f"anomalies.{k}" for k in ANOMALY_KINDS))


@dataclass
class _Request:
    id: str
    api: str
    model: str
    prompt_tokens: int
    started: float
    state: str = "prompt"  # prompt -> generating -> done
    output_tokens: int = 0
    first_token: float | None = None
    last_token: float | None = None
    ttft_ms: float | None = None
    tokens_per_s: float | None = None
    finish_reason: str | None = None
    slot: int = -1  # the engine's parallel sequence that served it, once finished
    # Of its prompt, once finished: reused (from a slot or disk), and of those, from disk.
    cached_tokens: int = 0
    disk_tokens: int = 0
    draft_tokens: int = 0  # speculation: draft tokens verified, and of those kept
    accepted_tokens: int = 0
    guided_tokens: int = 0  # tokens the call guard changed (not an anomaly: a fact of the run)
    anomalies: dict[str, int] = field(default_factory=lambda: dict.fromkeys(ANOMALY_KINDS, 0))

    @property
    def tokens_per_step(self) -> float | None:
        """Output tokens per decode step of this sequence: each step gives one token of its
        own plus the draft tokens it kept, so with speculation this is the speed-up in steps
        (the speed-up in time is less: a step with draft rows costs more). None before any
        output; 1.0 without speculation."""
        steps = self.output_tokens - self.accepted_tokens
        return self.output_tokens / steps if self.output_tokens and steps > 0 else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "api": self.api,
            "model": self.model,
            "state": self.state,
            "prompt_tokens": self.prompt_tokens,
            "output_tokens": self.output_tokens,
            "ttft_ms": self.ttft_ms,
            "tokens_per_s": self.tokens_per_s,
            "finish_reason": self.finish_reason,
            "slot": self.slot,
            "cached_tokens": self.cached_tokens,
            "disk_tokens": self.disk_tokens,
            "draft_tokens": self.draft_tokens,
            "accepted_tokens": self.accepted_tokens,
            "tokens_per_step": self.tokens_per_step,
            "guided_tokens": self.guided_tokens,
            "anomalies": dict(self.anomalies),
            "implicit_reasoning_ends": self.anomalies[IMPLICIT_REASONING_END],
        }


class Metrics:
    """Thread-safe metrics. `engine` (optional) supplies model name, state and queue depth."""

    def __init__(
        self,
        engine: Engine | None = None,
        *,
        max_requests: int = 200,
        max_points: int = 1000,
        window: float = 2.0,
        sample_every: float = 0.25,
    ):
        self.engine = engine
        self.window = window
        self.sample_every = sample_every
        self.t0 = time.perf_counter()
        self._lock = threading.Lock()
        self._observers: list[Any] = []
        self._requests: deque[_Request] = deque(maxlen=max_requests)  # newest first
        self._live: dict[str, _Request] = {}  # running, by id (also reachable past the log cap)
        self._token_times: deque[float] = deque()
        self._last_sample = float("-inf")
        self._series: dict[str, deque[tuple[float, float]]] = {
            name: deque(maxlen=max_points) for name in SERIES
        }
        self._totals: dict[str, Any] = {
            "requests": 0,
            "finished": 0,
            "prompt_tokens": 0,
            "cached_tokens": 0,
            # Speculation (engine/backends/llama/speculate.py): drafted, and of those kept.
            "draft_tokens": 0,
            "accepted_tokens": 0,
            # The prompt tokens by where they came from (issue 20): slot + disk = cached, and
            # slot + disk + computed = prompt.
            "prompt_tokens_by_source": {"slot": 0, "disk": 0, "computed": 0},
            "output_tokens": 0,
            "prompt_ms": 0.0,
            "decode_ms": 0.0,
            "finish_reasons": {},
            "anomalies": dict.fromkeys(ANOMALY_KINDS, 0),
            "implicit_reasoning_ends": 0,
            "guided_tokens": 0,
            "reasoning_budget": 0,  # reasonings the budget closed (engine/chat/budget.py)
        }

    # -- observers -------------------------------------------------------------------------

    def add_observer(self, obj: Any) -> None:
        """obj may define on_request_started(id, api, model, prompt_tokens),
        on_token(id, t, gap_s | None), on_anomaly(id, kind),
        on_request_finished(id, finish_reason, timings, latency_s)."""
        with self._lock:
            self._observers.append(obj)

    def remove_observer(self, obj: Any) -> None:
        with self._lock:
            self._observers.remove(obj)

    def _notify(self, method: str, *args: Any) -> None:
        with self._lock:
            observers = list(self._observers)
        for obs in observers:
            fn = getattr(obs, method, None)
            if fn is None:
                continue
            try:
                fn(*args)
            except Exception:  # metrics must never stop the engine
                log.exception("[prism] metrics observer %r failed in %s", obs, method)

    # -- writers (engine / service thread) -------------------------------------------------

    def request_started(
        self, id: str, api: str, model: str, prompt_tokens: int, t: float | None = None
    ) -> None:
        t = time.perf_counter() if t is None else t
        with self._lock:
            req = _Request(id, api, model, prompt_tokens, t)
            self._requests.appendleft(req)
            self._live[id] = req
            self._totals["requests"] += 1
            self._add_load(t)
        self._notify("on_request_started", id, api, model, prompt_tokens)

    def token(self, id: str, t: float | None = None) -> None:
        t = time.perf_counter() if t is None else t
        gap = None
        with self._lock:
            req = self._live.get(id)
            if req is not None:
                if req.first_token is None:
                    req.first_token = t
                    req.ttft_ms = (t - req.started) * 1000.0
                    req.state = "generating"
                elif req.last_token is not None:
                    gap = t - req.last_token
                req.last_token = t
                req.output_tokens += 1
            self._token_times.append(t)
            self._trim(t)
            if t - self._last_sample >= self.sample_every:
                self._last_sample = t
                self._add_point("tokens_per_s", t, self._rate(t))
        self._notify("on_token", id, t, gap)

    def guided(self, id: str) -> None:
        """Count one token the call guard changed (engine/backends/llama/guard.py)."""
        with self._lock:
            req = self._live.get(id)
            if req is not None:
                req.guided_tokens += 1
            self._totals["guided_tokens"] += 1

    def reasoning_budget(self, id: str) -> None:
        """Count one reasoning closed by its budget (engine/backends/llama/budget.py)."""
        with self._lock:
            self._totals["reasoning_budget"] += 1

    def anomaly(self, id: str, kind: str, text: str = "", t: float | None = None) -> None:
        """Count one anomaly; `text` is what it concerns (for an implicit end of thinking, the
        reasoning that preceded the call), used only for the log line."""
        t = time.perf_counter() if t is None else t
        with self._lock:
            req = self._live.get(id) or next((r for r in self._requests if r.id == id), None)
            if req is not None:
                req.anomalies[kind] = req.anomalies.get(kind, 0) + 1
            totals = self._totals["anomalies"]
            totals[kind] = totals.get(kind, 0) + 1
            if kind == IMPLICIT_REASONING_END:
                self._totals["implicit_reasoning_ends"] += 1
            if f"anomalies.{kind}" in self._series:
                self._add_point(f"anomalies.{kind}", t, totals[kind])
        if kind == IMPLICIT_REASONING_END:
            tail = text.replace("\n", "\\n")
            snippet = tail[:80] + ("..." if len(tail) > 80 else "")
            log.info("[prism] implicit end of thinking: %s %s", id, snippet)
        elif kind == REPAIRED_CALL:  # nothing repaired silently: say what (issue 11)
            log.info("[prism] repaired call: %s %s", id, text[:200])
        elif kind == INVALID_ARGUMENTS:  # what failed and where (engine/chat/arguments.py)
            log.info("[prism] invalid arguments: %s %s", id, text[:300])
        elif kind == EXTRA_TOOL_CALL:  # nothing dropped silently either
            log.info("[prism] extra tool call not sent (one call per reply): %s %s", id,
                     text.strip().replace("\n", "\\n")[:200])
        self._notify("on_anomaly", id, kind)

    def request_finished(
        self, id: str, finish_reason: str, timings: Timings, t: float | None = None
    ) -> None:
        t = time.perf_counter() if t is None else t
        with self._lock:
            req = self._live.pop(id, None)
            if req is None:  # never started here: still count it
                req = _Request(id, "", "", timings.prompt_tokens, t)
            req.state = "done"
            req.finish_reason = finish_reason
            # The engine's figures are authoritative (the same ones the API reports).
            req.prompt_tokens = timings.prompt_tokens or req.prompt_tokens
            req.output_tokens = timings.output_tokens or req.output_tokens
            if timings.ttft_ms or req.ttft_ms is None:
                req.ttft_ms = timings.ttft_ms
            req.tokens_per_s = timings.tokens_per_s
            req.slot = timings.slot
            req.cached_tokens, req.disk_tokens = timings.cached_tokens, timings.disk_tokens
            req.draft_tokens, req.accepted_tokens = timings.draft_tokens, timings.accepted_tokens
            tot = self._totals
            tot["finished"] += 1
            tot["prompt_tokens"] += timings.prompt_tokens
            tot["cached_tokens"] += timings.cached_tokens
            tot["draft_tokens"] += timings.draft_tokens
            tot["accepted_tokens"] += timings.accepted_tokens
            by_source = tot["prompt_tokens_by_source"]
            by_source["slot"] += timings.slot_tokens
            by_source["disk"] += timings.disk_tokens
            by_source["computed"] += timings.computed_tokens
            tot["output_tokens"] += timings.output_tokens
            tot["prompt_ms"] += timings.prompt_ms
            tot["decode_ms"] += timings.decode_ms
            tot["finish_reasons"][finish_reason] = tot["finish_reasons"].get(finish_reason, 0) + 1
            if req.output_tokens:
                self._add_point("ttft_ms", t, req.ttft_ms or 0.0)
            if timings.draft_tokens:  # speculation: one point a request that drafted
                self._add_point("draft_kept_pct", t, 100.0 * timings.acceptance)
            self._add_load(t)
            summary = req.to_dict()
            latency = t - req.started
        found = {k: n for k, n in summary["anomalies"].items() if n}
        log.info(
            "[prism] %s %s %s prompt=%d out=%d ttft=%.0fms tps=%.1f anomalies=%s",
            id,
            summary["api"] or "-",
            finish_reason,
            summary["prompt_tokens"],
            summary["output_tokens"],
            summary["ttft_ms"] or 0.0,
            summary["tokens_per_s"] or 0.0,
            ",".join(f"{k}={n}" for k, n in found.items()) or "none",
        )
        self._notify("on_request_finished", id, finish_reason, timings, latency)

    def sample(self, t: float | None = None) -> None:
        """Append a tokens/s and a queue-depth point now (a GUI timer calls this, so charts
        keep moving, down to zero, while nothing is generating)."""
        t = time.perf_counter() if t is None else t
        with self._lock:
            self._trim(t)
            self._last_sample = t
            self._add_point("tokens_per_s", t, self._rate(t))
            self._add_load(t)

    # -- readers (any thread) --------------------------------------------------------------

    def snapshot(self, t: float | None = None) -> dict[str, Any]:
        t = time.perf_counter() if t is None else t
        eng = self.engine
        with self._lock:
            self._trim(t)
            running = [r.id for r in self._live.values() if r.state == "generating"]
            slots = self.slots()
            if eng is not None:
                state, model, n_ctx = eng.state, eng.name, eng.n_ctx
            else:
                state, model, n_ctx = ("generating" if self._live else "idle"), "", 0
            return {
                "engine": {
                    "model": model,
                    "n_ctx": n_ctx,
                    "state": state,
                },
                "live": {
                    "state": state,
                    "queue_depth": self._queue_depth(),
                    "slots_busy": slots[0],
                    "slots_total": slots[1],
                    "in_flight": len(self._live),
                    "generating": running,
                    "tokens_per_s": self._rate(t),
                    "window_s": self.window,
                },
                "requests": [r.to_dict() for r in self._requests],
                "totals": {
                    **self._totals,
                    "finish_reasons": dict(self._totals["finish_reasons"]),
                    "anomalies": dict(self._totals["anomalies"]),
                    "prompt_tokens_by_source": dict(self._totals["prompt_tokens_by_source"]),
                },
            }

    def series(self) -> dict[str, list[tuple[float, float]]]:
        with self._lock:
            return {name: list(points) for name, points in self._series.items()}

    # -- internals (lock held) -------------------------------------------------------------

    def _trim(self, t: float) -> None:
        times = self._token_times
        while times and times[0] <= t - self.window:
            times.popleft()

    def _rate(self, t: float) -> float:
        times = self._token_times
        n = len(times)
        if n < 2:
            return 0.0
        span = max(t, times[-1]) - times[0]
        return (n - 1) / span if span > 0 else 0.0

    def _queue_depth(self) -> int:
        eng = self.engine
        if eng is not None:
            try:
                return int(eng.queue_depth())
            except Exception:  # a closed engine must not break metrics
                return 0
        # Without an engine: one job runs at a time, the other started ones wait.
        return max(0, len(self._live) - 1)

    def slots(self) -> tuple[int, int]:
        """(busy, total) parallel sequences; an engine without slots runs one job at a time."""
        eng = self.engine
        try:
            if eng is not None and hasattr(eng, "busy_slots"):
                return int(eng.busy_slots()), int(eng.parallel)
        except Exception:  # a closed engine must not break metrics
            return 0, 1
        busy = eng.state == "generating" if eng is not None else bool(self._live)
        return int(busy), 1

    def _add_load(self, t: float) -> None:
        """A queue-depth and a busy-slots point at `t`: how many wait, how many are served."""
        self._add_point("queue_depth", t, self._queue_depth())
        self._add_point("busy_slots", t, self.slots()[0])

    def _add_point(self, name: str, t: float, value: float) -> None:
        self._series[name].append((t - self.t0, float(value)))
