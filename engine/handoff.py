"""The hand-off: what a live run does per token, run beside the engine thread, not on it.

Owns `Handoff` and the process's one instance, `HANDOFF`: a FIFO of callables and one daemon
thread ("prism-pipeline") that runs them in the order they were put. engine/service.py puts
each token of a run there (its parser, event filters, recorder, metrics, listeners and the
wake-up of its consumers), so the engine thread's work per token is one `put`, and the
pipeline runs while the next `llama_decode` runs (it releases the GIL). Each wake-up drains
everything waiting, then runs the flushes the items asked for once each (a run's consumers
are woken once per wake-up, not once per event). `drain()` returns once everything put
before it has run: a run's finish waits for its tokens that way, so when `on_finish` returns
the run is done, recorded and measured, as it was when all of it ran on the engine thread.

Threads: `put` and `drain` from any thread; the callables and flushes on "prism-pipeline"
only. A callable that raises is logged and the others go on (the service catches its own).
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable

log = logging.getLogger("prism")

# An item: a callable and its argument; what it returns, when not None, is a flush to run once
# after the wake-up's last item.
Item = tuple[Callable[[object], Callable[[], None] | None], object]


class Handoff:
    """See the module docstring. The thread starts with the first `put`."""

    def __init__(self, name: str = "prism-pipeline") -> None:
        self.name = name
        self._q: queue.SimpleQueue[Item] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()

    def put(self, fn: Callable[[object], Callable[[], None] | None], arg: object) -> None:
        if self._thread is None:
            self._start()
        self._q.put((fn, arg))

    def on_thread(self) -> bool:
        """Is the caller the hand-off's own thread (where waiting for it would never end)?"""
        return threading.current_thread() is self._thread

    def drain(self, timeout: float | None = None) -> bool:
        """Wait until everything put so far has run (at once on the hand-off's own thread, or
        before it ever started). False: `timeout` passed first."""
        if self._thread is None or self.on_thread():
            return True
        done = threading.Event()
        self.put(lambda _: done.set(), None)
        return done.wait(timeout)

    def _start(self) -> None:
        with self._start_lock:
            if self._thread is None:
                t = threading.Thread(target=self._run, name=self.name, daemon=True)
                t.start()
                self._thread = t

    def _run(self) -> None:
        q = self._q
        while True:
            batch = [q.get()]
            while True:  # everything that came while the last batch ran: one wake-up
                try:
                    batch.append(q.get_nowait())
                except queue.Empty:
                    break
            flushes: dict[Callable[[], None], None] = {}  # in first-asked order, once each
            for fn, arg in batch:
                try:
                    flush = fn(arg)
                except Exception:
                    log.exception("[prism] a pipeline step failed")
                    continue
                if flush is not None:
                    flushes[flush] = None
            for flush in flushes:
                try:
                    flush()
                except Exception:
                    log.exception("[prism] a pipeline flush failed")


HANDOFF = Handoff()
