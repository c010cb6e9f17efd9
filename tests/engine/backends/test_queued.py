"""engine/backends/queued.py's `QueuedEngine`: the FIFO half every local engine shares, on a minimal
engine whose jobs wait for the test to let them go (no model, no replay file).

StopGate (the UTF-8 and stop-string half) is tested in tests/engine/backends/llama/test_engine.py
beside the engine that feeds it real token bytes; a failed load in test_llama.py too."""

from __future__ import annotations

import logging
import threading

import pytest

from engine.backends.base import Finish, Job, Timings, Token
from engine.backends.queued import QueuedEngine
from tests.support import wait_until


class Gated(QueuedEngine):
    """Serves a job by emitting its prompt as one token once `release(prompt)` is called, or
    "cancelled" as soon as the job is; a prompt starting with "raise" raises instead."""

    name, n_ctx = "gated", 64

    def __init__(self) -> None:
        self.served: list[str] = []
        self._go: dict[str, threading.Event] = {}
        self._lock = threading.Lock()
        self._start_worker("test-gated")

    def gate(self, prompt: str) -> threading.Event:
        with self._lock:
            return self._go.setdefault(prompt, threading.Event())

    def release(self, prompt: str) -> None:
        self.gate(prompt).set()

    def _serve(self, job: Job) -> None:
        self.served.append(job.prompt)
        if job.prompt.startswith("raise"):
            raise ValueError("bad job")
        while not self.gate(job.prompt).wait(0.01):
            if job.cancelled.is_set():
                self._finish(job, "cancelled", Timings())
                return
        job.on_token(Token(0, job.prompt, 0.0))
        self._finish(job, "stop", Timings(output_tokens=1))


class Seen:
    def __init__(self, prompt: str, finish_raises: bool = False) -> None:
        self.tokens: list[str] = []
        self.finishes: list[Finish] = []
        self.done = threading.Event()
        self.finish_raises = finish_raises
        self.job = Job(prompt=prompt, on_token=lambda t: self.tokens.append(t.text),
                       on_finish=self._fin)

    def _fin(self, fin: Finish) -> None:
        self.finishes.append(fin)
        self.done.set()
        if self.finish_raises:
            raise RuntimeError("consumer bug")

    def wait(self) -> Finish:
        assert self.done.wait(10), f"{self.job.prompt!r} never finished"
        return self.finishes[-1]


@pytest.fixture
def eng():
    e = Gated()
    assert e.ready.wait(5) and e.state == "idle"
    yield e
    e.close()


def test_jobs_run_one_at_a_time_in_submission_order(eng):
    jobs = [Seen(p) for p in ("a", "b", "c")]
    for s in jobs:
        eng.submit(s.job)
    wait_until(lambda: eng.served == ["a"], what="the first job to start")
    assert eng.state == "generating" and eng.queue_depth() == 2  # the running one not counted
    for p in ("c", "b", "a"):  # released in reverse: the order is still the queue's
        eng.release(p)
    assert [s.wait().reason for s in jobs] == ["stop"] * 3
    assert eng.served == ["a", "b", "c"] and [s.tokens for s in jobs] == [["a"], ["b"], ["c"]]
    wait_until(lambda: eng.state == "idle", what="the engine to go idle")
    assert eng.queue_depth() == 0


def test_a_cancelled_waiting_job_stops_counting_at_once(eng):
    first, second, third = Seen("a"), Seen("b"), Seen("c")
    for s in (first, second, third):
        eng.submit(s.job)
    wait_until(lambda: eng.served == ["a"], what="the first job to start")
    assert eng.queue_depth() == 2
    second.job.cancel()
    assert eng.queue_depth() == 1  # before the worker has looked (the server's 429 limit)
    eng.release("a")
    eng.release("c")
    assert second.wait().reason == "cancelled" and second.tokens == []
    assert (first.wait().reason, third.wait().reason) == ("stop", "stop")


def test_a_job_that_raises_ends_in_error_and_the_next_is_served(eng):
    bad, good = Seen("raise now"), Seen("ok")
    eng.submit(bad.job)
    eng.submit(good.job)
    eng.release("ok")
    fin = bad.wait()
    assert (fin.reason, fin.error) == ("error", "ValueError: bad job")
    assert good.wait().reason == "stop" and good.tokens == ["ok"]


def test_a_consumer_whose_on_finish_raises_is_told_once(eng, caplog):
    caplog.set_level(logging.ERROR, logger="prism")
    rude, next_ = Seen("a", finish_raises=True), Seen("b")
    eng.submit(rude.job)
    eng.submit(next_.job)
    eng.release("a")
    eng.release("b")
    assert next_.wait().reason == "stop"
    assert [f.reason for f in rude.finishes] == ["stop"]  # not a second, "error", finish
    assert "on_finish callback failed" in caplog.text


def test_close_cancels_the_running_job_and_finishes_the_waiting_ones(eng):
    running, waiting = Seen("a"), Seen("b")
    eng.submit(running.job)
    eng.submit(waiting.job)
    wait_until(lambda: eng.served == ["a"], what="the first job to start")
    eng.close()
    assert waiting.done.is_set()  # finished by close() itself, on this thread
    assert waiting.finishes[0].reason == "cancelled" and eng.served == ["a"]
    assert running.wait().reason == "cancelled"
    assert eng.state == "closed" and eng.queue_depth() == 0
    with pytest.raises(RuntimeError, match="closed"):
        eng.submit(Seen("c").job)
    eng.close()  # twice is harmless
