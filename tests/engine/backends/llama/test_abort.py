"""engine/backends/llama/abort.py on a real llama.cpp context of the default model: the callback
answers "abort" only when every armed cancel is set, a disarmed or generating step never aborts, and
llama.cpp's error lines from an aborting decode are lowered to debug on that thread alone.
(A real abort mid-chunk is tested through the engine in
tests/engine/backends/llama/test_batch.py.)"""

from __future__ import annotations

import logging
import threading
from pathlib import Path

import pytest

from engine.backends.llama.batch import Batcher
from engine.backends.llama.vocab import Vocab

pytestmark = pytest.mark.model


@pytest.fixture
def abort(default_model: Path):
    vocab = Vocab(default_model)
    b = Batcher(default_model, vocab, lambda job, fin: None, n_ctx=256, parallel=1,
                n_threads=1)
    yield b._abort
    b.close()
    vocab.close()


def record(thread: int) -> logging.LogRecord:
    r = logging.LogRecord("prism.llama", logging.WARNING, __file__, 1, "failed to compute "
                          "graph", None, None)
    r.thread = thread
    return r


def test_aborts_only_when_every_armed_job_is_cancelled(abort):
    first, second = threading.Event(), threading.Event()
    abort.arm([first, second])
    assert not abort._should_abort(None)
    first.set()
    assert not abort._should_abort(None)  # another job's prompt is still in the step
    second.set()
    assert abort._should_abort(None)
    abort.disarm()
    assert not abort._should_abort(None)
    abort.arm(())  # a step with a generating sequence: nothing to abort, callback removed
    assert not abort._should_abort(None) and not abort._installed


def test_llama_cpp_errors_of_an_abort_are_debug_on_its_thread_only(abort):
    gone = threading.Event()
    gone.set()
    abort.arm([gone])
    here, elsewhere = record(threading.get_ident()), record(threading.get_ident() + 1)
    logger = logging.getLogger("prism.llama")
    assert logger.filter(here) and logger.filter(elsewhere)
    assert here.levelno == logging.DEBUG and elsewhere.levelno == logging.WARNING
    abort.disarm()
    later = record(threading.get_ident())
    logger.filter(later)
    assert later.levelno == logging.WARNING  # no abort under way: errors stay errors
    abort.close()
    assert abort._quiet not in logger.filters
