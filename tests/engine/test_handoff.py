"""engine/handoff.py: callables run in order on one thread beside the caller, flushed once per
wake-up, and `drain` waits for what was put before it."""

from __future__ import annotations

import logging
import threading

from engine.handoff import Handoff


def test_items_run_in_order_then_each_flush_once_per_wake_up():
    h = Handoff("test-handoff")
    calls: list[object] = []
    running, release = threading.Event(), threading.Event()

    def first(_):
        calls.append(("item", 0))
        running.set()
        release.wait()  # the next items pile up meanwhile: they are one wake-up

    def flush_a():
        calls.append("flush a")

    def flush_b():
        calls.append("flush b")

    def item(arg):
        i, flush = arg
        calls.append(("item", i))
        return flush

    h.put(first, None)
    running.wait()
    for i, flush in enumerate((flush_a, flush_b, flush_a, flush_b), start=1):
        h.put(item, (i, flush))
    release.set()
    assert h.drain(30)
    assert calls == [("item", i) for i in range(5)] + ["flush a", "flush b"]


def test_it_runs_on_its_own_thread_and_drain_there_does_not_wait():
    h = Handoff("test-handoff-2")
    names: list[str] = []
    h.put(lambda _: names.append(threading.current_thread().name), None)
    h.put(lambda _: names.append(str(h.drain(0))), None)  # on its thread: at once, True
    assert h.drain(30)
    assert names == ["test-handoff-2", "True"]


def test_a_failing_item_is_logged_and_the_others_run(caplog):
    h = Handoff("test-handoff-3")
    seen: list[int] = []

    def boom(_):
        raise RuntimeError("listener bug")

    with caplog.at_level(logging.ERROR, logger="prism"):
        h.put(boom, None)
        h.put(seen.append, 1)
        assert h.drain(30)
    assert seen == [1]
    assert "a pipeline step failed" in caplog.text and "listener bug" in caplog.text


def test_drain_before_anything_was_put_returns_at_once():
    assert Handoff("never-started").drain(0)
