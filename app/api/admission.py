"""Admission: the `--max-queue` limit, counted from the moment a request is accepted.

Owns `Admission` (one per `AppState`), its `Ticket`s and `retry_after`. Every route that runs
the model takes a ticket before anything else: the chat APIs (app/api/runs.py), POST
/v1/completions (app/api/completions.py) and `--tap` (app/api/tap.py).

What counts as waiting: the requests accepted and still being prepared (the template rendered,
the prompt tokenized, in a worker thread), plus the engine's own `queue_depth()`: jobs queued
and not yet in a sequence (an upstream engine counts the requests in flight there, having no
queue of its own). The requests being served, `--parallel` of them, do not count: with
`--parallel N --max-queue M`, N run and M wait, and the next one is answered 429 with
Retry-After. A burst is counted as it comes, each request the moment it is accepted, not when
it reaches the engine milliseconds later (32 simultaneous requests once all got past a limit
of 16 that way).

A ticket leaves the count when its job is queued (the engine counts it from then on), or when
the request fails or is cancelled before that. The hand-over happens under the admission's
lock, the same lock `admit` reads the count under, so a job is never counted twice or not at
all. The chat APIs queue their job inside `Service.submit`, on a worker thread: the hand-over
is caught there by a service listener (the "start" update comes right before the job is
queued, on that thread) and completed when `submit` returns.

`admit` runs on the asyncio loop's thread; `Ticket.handing`, `Ticket.release` and
`submit_run` on any thread.
"""

from __future__ import annotations

import contextlib
import math
import threading
import weakref
from collections.abc import Iterator
from typing import TYPE_CHECKING

from app.api.errors import APIError
from engine.chat.request import ChatRequest
from engine.service import Run, RunUpdate, Service

if TYPE_CHECKING:
    from app.api.state import AppState

_local = threading.local()  # the ticket a worker thread is queueing a run for
_hooked: weakref.WeakSet[Service] = weakref.WeakSet()


def retry_after(state: AppState, depth: int) -> int:
    """Seconds until a slot is likely free: the queue times the mean request time so far."""
    mean_s = 1.0
    finished = busy_ms = 0.0
    for service in state.services():
        if service.metrics is not None:
            totals = service.metrics.snapshot()["totals"]
            finished += totals.get("finished") or 0
            busy_ms += totals.get("prompt_ms", 0) + totals.get("decode_ms", 0)
    if finished:
        mean_s = busy_ms / finished / 1000.0
    return max(1, math.ceil(depth * mean_s))


class Admission:
    """The requests accepted and not yet queued in the engine, and the lock the count is read
    and handed over under."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._preparing = 0

    @property
    def preparing(self) -> int:
        return self._preparing

    def admit(self, state: AppState, waiting_for: str = "waiting for the model") -> Ticket:
        """A ticket for one request, or a 429 (with Retry-After) when `--max-queue` requests
        wait already. Called on the loop's thread when a request is accepted."""
        engines = [service.engine for service in state.services()]
        limit = state.config.max_queue
        with self._lock:  # over the whole server: every resident model's queue
            depth = sum(engine.queue_depth() for engine in engines) + self._preparing
            if depth < limit:
                self._preparing += 1
                return Ticket(self)
        raise APIError(
            "rate_limit",
            f"{depth} requests are already {waiting_for} (the limit is {limit}); retry later",
            code="rate_limit_exceeded",
            headers={"Retry-After": str(retry_after(state, depth))},
        )


class Ticket:
    """One accepted request's place in the count until its job is queued."""

    def __init__(self, admission: Admission) -> None:
        self._admission = admission
        self._open = True

    def _drop(self) -> None:  # the admission's lock is held
        if self._open:
            self._open = False
            self._admission._preparing -= 1

    def release(self) -> None:
        """The request failed or was cancelled before its job was queued (a no-op after)."""
        with self._admission._lock:
            self._drop()

    @contextlib.contextmanager
    def handing(self) -> Iterator[None]:
        """Around the call that queues the job: the count moves from the ticket to the
        engine's queue at one instant (and the ticket is dropped even if queueing fails)."""
        with self._admission._lock:
            try:
                yield
            finally:
                self._drop()


def submit_run(ticket: Ticket, service: Service, request: ChatRequest) -> Run:
    """`service.submit(request)` on this (worker) thread, handing the ticket over as the job
    is queued. The ticket is gone when this returns or raises."""
    if service not in _hooked:
        service.add_listener(_on_update)
        _hooked.add(service)
    _local.ticket, _local.held = ticket, None
    try:
        return service.submit(request)
    finally:
        held, _local.ticket, _local.held = _local.held, None, None
        if held is not None:  # the lock was taken at "start", right before the job was queued
            held._drop()
            held._admission._lock.release()
        else:
            ticket.release()


def _on_update(upd: RunUpdate) -> None:
    # Service listeners run on the thread that produced the update: for "start", the thread
    # in `Service.submit`, just before it queues the job. Other threads' runs (the window's
    # Compose, a --tap run) carry no ticket.
    ticket = getattr(_local, "ticket", None)
    if upd.kind != "start" or ticket is None:
        return
    _local.ticket = None
    ticket._admission._lock.acquire()
    _local.held = ticket
