"""llama.cpp's log lines, routed into Python logging instead of the process's stderr.

Owns `install()`. llama.cpp (and ggml) report through one C log callback. llama-cpp-python
installs its own at import, which prints to stderr, and silences the whole process while a
model loads (`suppress_stdout_stderr`: fds 1 and 2 pointed at /dev/null and sys.stdout /
sys.stderr swapped, for every thread). The model loads on the engine's worker thread while the
main thread prints the server's banner and uvicorn sets up its log handlers, so with a real
model the terminal showed nothing at all (issue 9, item 2). With `install()` every llama.cpp
line goes to the logger "prism.llama" at debug level (errors at warning level, so a failure is
not hidden), and the engine loads with llama-cpp-python's `verbose=True`, which is
what turns its silencing off; nothing here touches a stream.

`install()` is idempotent and runs on the thread that first creates an engine; the callback
then runs on whichever thread calls into llama.cpp (the worker, or a tokenizing thread).
"""

from __future__ import annotations

import atexit
import ctypes
import logging
import sys
import threading

log = logging.getLogger("prism.llama")

# ggml_log_level: NONE 0, DEBUG 1, INFO 2, WARN 3, ERROR 4, CONT 5 (continues the last line;
# llama-cpp-python's own callback still reads an older order). Everything is debug but errors:
# llama.cpp warns on ordinary loads too (a context smaller than the trained one, say).
_LEVELS = {4: logging.WARNING}
_CONT = 5
MAX_LINE = 500  # characters of one line kept

_lock = threading.Lock()
_callback = None  # the ctypes function object: it must outlive every call llama.cpp makes
_pending: list[str] = []  # a line llama.cpp sends in pieces
_pending_level = logging.DEBUG


def _emit(level: int, text: str) -> None:
    global _pending_level
    with _lock:
        if level != _CONT:
            _pending_level = _LEVELS.get(level, logging.DEBUG)
        _pending.append(text)
        if not text.endswith("\n"):
            return
        line, lvl = "".join(_pending).rstrip("\n"), _pending_level
        _pending.clear()
    if len(line) > MAX_LINE:  # a grammar llama.cpp cannot parse comes whole with its error
        line = f"{line[:MAX_LINE]}... ({len(line):,} characters)"
    if line:
        log.log(lvl, "%s", line)


def install() -> None:
    """Route llama.cpp's logs into logging (once per process). Imports llama_cpp."""
    global _callback
    with _lock:
        if _callback is not None:
            return
        import llama_cpp

        @llama_cpp.llama_log_callback
        def callback(level: int, text: bytes, user_data: ctypes.c_void_p) -> None:
            _emit(level, text.decode("utf-8", "replace"))

        _callback = callback
        llama_cpp.llama_log_set(callback, ctypes.c_void_p(0))


@atexit.register
def _close_devnull() -> None:
    """llama-cpp-python opens /dev/null twice at import for its silencing, which Prism never
    uses, and never closes them: every run ended with a ResourceWarning. Registered when this
    module is imported (engine/grammar/json_schema.py and engine/backends/llama/vocab.py, the first
    to import llama_cpp), it closes them at exit if llama_cpp was imported at all."""
    utils = sys.modules.get("llama_cpp._utils")
    for name in ("outnull_file", "errnull_file"):
        f = getattr(utils, name, None)  # private to llama-cpp-python: may go away
        if f is not None:
            f.close()
