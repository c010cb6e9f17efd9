"""PrefillAbort: llama.cpp's abort callback, armed for prefill-only decode steps.

Owns the ctypes callback object, whether it is installed on the context, the cancel events it
reads, and a log filter. engine/backends/llama/batch.py uses one per context, on the engine's
worker thread ("prism-llama"); the callback itself runs on that thread too (ggml's compute thread 0
is the thread calling `llama_decode`).

Why (docs/design.md, section 11): one 512-token prompt chunk takes 8-30 s on a slow shared
CPU, too long for a client that hung up to keep the engine busy. A step that carries no
generating sequence arms the callback, which ggml polls between graph nodes (~600 polls a
512-token chunk on the default model); it answers "abort" only when every job with tokens in
that step is cancelled, so `llama_decode` returns 2 within one graph node. Steps with a
generating sequence disarm it: token generation pays nothing, and a cancel never aborts a step
that another job's tokens are in.

llama.cpp reports an aborted decode as three failures at error level ("failed to compute
graph"...): an ordinary hang-up would log them as warnings, so while this context's own decode
is aborting, its thread's llama.cpp lines (logger "prism.llama") go at debug level.
"""

from __future__ import annotations

import ctypes
import logging
import threading
from collections.abc import Iterable
from typing import Any


class PrefillAbort:
    """See the module docstring. `arm(events)` before a prefill-only decode (every event set
    means abort), `arm(())` before any other, `disarm()` after each, `close()` at the end."""

    def __init__(self, ctx: Any) -> None:
        import llama_cpp as C

        self._ctx = ctx
        self._on: tuple[threading.Event, ...] = ()
        # The ctypes object must live as long as the context may call it: kept here.
        self._cb = C.ggml_abort_callback(self._should_abort)
        self._installed = False
        self._thread = 0  # the thread calling llama_decode (set at each arm)
        self._log = logging.getLogger("prism.llama")
        self._log.addFilter(self._quiet)

    def arm(self, cancelled: Iterable[threading.Event]) -> None:
        on = tuple(cancelled)
        self._install(bool(on))
        self._thread = threading.get_ident()
        self._on = on

    def disarm(self) -> None:
        self._on = ()

    def _should_abort(self, _data: object) -> bool:
        """The callback. It runs while the other compute threads wait at a barrier, so it only
        reads a tuple of Events prepared before the decode. Each call takes the GIL: free when
        no other thread wants it (512 prompt tokens: 3.27 s CPU with it, 3.26 s without), but
        beside a thread that keeps the GIL busy each call may wait up to the switch interval
        (5 ms): +2-4 s on a 512-token chunk, measured with a spinning thread."""
        on = self._on
        return bool(on) and all(e.is_set() for e in on)

    def _quiet(self, record: logging.LogRecord) -> bool:
        if record.thread == self._thread and self._should_abort(None):
            record.levelno, record.levelname = logging.DEBUG, "DEBUG"
        return True

    def _install(self, on: bool) -> None:
        import llama_cpp as C

        if on != self._installed:
            cb = self._cb if on else ctypes.cast(None, C.ggml_abort_callback)  # NULL
            C.llama_set_abort_callback(self._ctx, cb, None)
            self._installed = on

    def close(self) -> None:
        if self._installed:
            self._install(False)
        self._log.removeFilter(self._quiet)
