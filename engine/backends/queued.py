"""The halves both engines share: the FIFO job queue with its worker, and the stop gate.

Owns `QueuedEngine` (waiting jobs, one daemon worker thread, cancel and close) and `StopGate`
(raw token bytes to whole-character `Token`s, stop strings cut out).
engine/backends/llama/engine.py and engine/record/replay.py build on them, so both engines behave
the same way downstream. `submit`, `queue_depth` and `close` run on any thread; everything else on
the engine's worker thread.

- Output bytes go through an incremental UTF-8 decoder; a token whose bytes end mid-character
  is held (with any tokens after it) until the character completes, so `Token.text` is always
  whole characters. Invalid byte sequences become U+FFFD rather than an exception.
- Stop strings are held back at token granularity: a token is released only once no stop
  string can begin inside its text. At a stop, the token where the stop string begins keeps
  the text before it, and later tokens carry "" (they were generated and are counted, but the
  stop string is never emitted). Every generated token except the end-of-generation token is
  reported exactly once, so `"".join(token.text)` is the output.
- A job cancelled while it waits stops counting in `queue_depth()` at once (the server's 429
  limit reads it); its on_finish("cancelled") comes when the worker next looks at the queue
  (the llama engine looks after every decode step).
"""

from __future__ import annotations

import codecs
import logging
import threading
import time
from collections import deque
from collections.abc import Sequence
from typing import Any

from engine.backends.base import Finish, Job, Timings, Token
from engine.chat.request import ChatRequest

log = logging.getLogger("prism")

LOADING, IDLE, GENERATING, CLOSED, ERROR = "loading", "idle", "generating", "closed", "error"


class StopGate:
    """Turns raw token bytes into `Token`s: whole UTF-8 characters, stop strings cut out.

    Pure Python, no model; `ReplayEngine` uses it too. `push` returns the tokens that can be
    released now; after `stopped` is set, generation must end. `finish` releases the rest.
    """

    def __init__(self, stops: Sequence[str] = ()):
        self.stops = tuple(s for s in stops if s)
        self.stopped = False
        self.hit: str | None = None  # the stop string that stopped it
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self._pending: list[list[Any]] = []  # [id, text, t, top, guided, forced] not released
        self._text = ""  # concatenated text of _pending

    def push(self, tok_id: int, data: bytes, t: float, top: tuple = (),
             guided: str | None = None, forced: bool = False) -> list[Token]:
        text = self._decoder.decode(data)
        if not self.stops and not self._pending and not self._decoder.getstate()[0]:
            return [Token(tok_id, text, t, top, guided, forced)]  # nothing to hold it for
        self._pending.append([tok_id, text, t, top, guided, forced])
        self._text += text
        # A stop string can only begin inside pending text: whatever could start one was held.
        hits = [(p, s) for s in self.stops if (p := self._text.find(s)) >= 0]
        if hits:
            self.stopped = True
            cut, self.hit = min(hits)
            return self._release_all(cut=cut)
        if self._decoder.getstate()[0]:
            return []  # half a character waiting for its next bytes
        return self._release_upto(len(self._text) - self._hold())

    @property
    def held(self) -> int:
        """Tokens pushed and not released yet (a stop string's possible start)."""
        return len(self._pending)

    def finish(self) -> list[Token]:
        tail = self._decoder.decode(b"", final=True)  # dangling bytes -> U+FFFD
        if tail and self._pending:
            self._pending[-1][1] += tail
            self._text += tail
        return self._release_all(cut=len(self._text))

    def _hold(self) -> int:
        """Length of the longest tail of the pending text that starts some stop string."""
        best = 0
        for s in self.stops:
            for k in range(min(len(s) - 1, len(self._text)), best, -1):
                if self._text.endswith(s[:k]):
                    best = k
                    break
        return best

    def _release_upto(self, limit: int) -> list[Token]:
        out: list[Token] = []
        end = 0
        while self._pending and end + len(self._pending[0][1]) <= limit:
            tok_id, text, t, top, guided, forced = self._pending.pop(0)
            end += len(text)
            out.append(Token(tok_id, text, t, top, guided, forced))
        self._text = self._text[end:]
        return out

    def _release_all(self, cut: int) -> list[Token]:
        out: list[Token] = []
        pos = 0
        for tok_id, text, t, top, guided, forced in self._pending:
            keep = max(0, min(len(text), cut - pos))
            pos += len(text)
            out.append(Token(tok_id, text[:keep], t, top, guided, forced))
        self._pending.clear()
        self._text = ""
        return out



class QueuedEngine:
    """The FIFO half of an engine: waiting jobs, one daemon worker thread, cancel and close.

    Subclasses set `name`/`n_ctx`, call `_start_worker(thread_name)` at the end of __init__,
    and either implement `_serve(job)` (one job at a time; it must call `self._finish(job,
    ...)` once) or replace `_loop()` (the llama engine's batch loop). `_setup()` runs first on
    the worker thread (load a model there); `_teardown()` runs last on it. A job that raises
    (say, a consumer's on_token) ends with "error" and the worker serves the next one.
    """

    name: str
    n_ctx: int
    special_texts: tuple[str, ...] = ()  # no vocabulary (replay); LlamaEngine reads its own

    def _start_worker(self, thread_name: str) -> None:
        self.ready = threading.Event()
        self.load_error: str | None = None
        self.state = LOADING
        self._waiting: deque[Job] = deque()
        self._cond = threading.Condition()  # guards _waiting, _running and _closed
        self._running: list[Job] = []  # started, not finished
        self._finished: set[int] = set()  # id()s of running jobs whose on_finish was called
        self._closed = False
        self._thread = threading.Thread(target=self._run, name=thread_name, daemon=True)
        self._thread.start()

    def submit(self, job: Job) -> None:
        with self._cond:
            if self._closed:
                raise RuntimeError("engine is closed")
            if not job.submitted_at:
                job.submitted_at = time.perf_counter()
            self._waiting.append(job)
            self._cond.notify()

    def prepare(self, job: Job, request: ChatRequest) -> tuple[str, str] | None:
        """A new output is parsed as the service's pack says (see `Engine.prepare`)."""
        return None

    def queue_depth(self) -> int:
        """Jobs waiting for the model; running ones and cancelled ones are not counted."""
        with self._cond:
            return sum(1 for job in self._waiting if not job.cancelled.is_set())

    def close(self, timeout: float = 10.0) -> None:
        """Cancel the running jobs and the waiting ones (their on_finish("cancelled") is called
        on this thread), then stop the worker."""
        with self._cond:
            if self._closed:
                return
            self._closed = True
            waiting = list(self._waiting)
            self._waiting.clear()
            running = list(self._running)
            self._cond.notify_all()
        for job in running:
            job.cancel()
        for job in waiting:
            job.cancel()
            try:
                job.on_finish(Finish("cancelled", Timings()))
            except Exception:
                log.exception("[prism] on_finish callback failed")
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout)

    # -- worker thread ---------------------------------------------------------------------

    def _setup(self) -> None:
        pass

    def _teardown(self) -> None:
        pass

    def _serve(self, job: Job) -> None:
        raise NotImplementedError

    def _finish(
        self, job: Job, reason: str, timings: Timings, error: str | None = None,
        stop_sequence: str | None = None, status: int | None = None,
    ) -> None:
        self._finished.add(id(job))
        job.on_finish(Finish(reason, timings, error, stop_sequence, status))

    def _take(self, block: bool = True) -> Job | None:
        """The next waiting job, now marked running; None once closed (or, without `block`,
        when none waits)."""
        with self._cond:
            while block and not self._waiting and not self._closed:
                self._cond.wait()
            if self._closed or not self._waiting:
                return None
            job = self._waiting.popleft()
            self._running.append(job)
            return job

    def _put_back(self, job: Job) -> None:
        """Return a job `_take` gave out to the head of the queue (it must wait longer)."""
        with self._cond:
            self._running.remove(job)
            if self._closed:  # close() has drained the queue already: end it here
                job.cancel()
                self._running.append(job)
            else:
                self._waiting.appendleft(job)

    def _done(self, job: Job) -> None:
        with self._cond:
            if job in self._running:
                self._running.remove(job)
            self._finished.discard(id(job))

    def _take_cancelled(self) -> list[Job]:
        """Remove the waiting jobs that were cancelled, marked running (to be finished)."""
        with self._cond:
            gone = [job for job in self._waiting if job.cancelled.is_set()]
            if gone:
                self._waiting = deque(j for j in self._waiting if not j.cancelled.is_set())
                self._running.extend(gone)
            return gone

    def _run(self) -> None:
        try:
            self._setup()
        except Exception as e:  # reported through load_error and every job
            self.load_error = f"{type(e).__name__}: {e}"
        self.state = IDLE if self.load_error is None else ERROR
        self.ready.set()
        try:
            self._loop()
        finally:
            self.state = CLOSED
            self._teardown()

    def _loop(self) -> None:
        while (job := self._take()) is not None:
            if self._closed:  # close() may have missed it between _take() and here
                job.cancel()
            if self.load_error is not None:
                self._guarded(job, lambda j: self._finish(j, "error", Timings(), self.load_error))
                self._done(job)
                continue
            self.state = GENERATING
            try:
                self._guarded(job, self._serve)
            finally:
                self._done(job)
                self.state = IDLE

    def _guarded(self, job: Job, fn: Any) -> None:
        try:
            fn(job)
        except Exception as e:  # one bad job must not stop the engine
            self._fail(job, e)

    def _fail(self, job: Job, e: BaseException) -> None:
        if id(job) in self._finished:  # the consumer's on_finish raised: nothing left to tell
            log.exception("[prism] on_finish callback failed")
            return
        log.warning("[prism] job failed: %s: %s", type(e).__name__, e)
        try:
            self._finish(job, "error", Timings(), f"{type(e).__name__}: {e}")
        except Exception:
            log.exception("[prism] on_finish callback failed")

