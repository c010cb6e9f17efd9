"""ReplayEngine: plays recorded or hand-written model outputs through the Engine protocol.

Owns a daemon worker thread ("prism-replay") that serves jobs FIFO, like LlamaEngine, and
calls the job's callbacks on it. Everything downstream (parser, API, GUI, metrics) cannot tell
a replay from a live model, which is the point: demos, tests and bug reports without a model.

Sources, in order, each giving one or more outputs:
- a Prism recording (engine/recording.py; recognised by its header line, whatever the file is
  called): one output per recorded request, in file order, with the recorded token texts,
  ids, times and finish reason. A damaged recording plays what precedes the damage (a warning
  is logged).
- any other file: plain UTF-8 text taken as one whole model output, finishing with "stop".
  It is cut into tokens deterministically by `split_text`: each piece is optional leading
  whitespace plus up to 4 non-space characters (a long word becomes several pieces; trailing
  whitespace is a piece of its own), about the size of real BPE tokens. Piece ids are a CRC32
  of the piece, and the pace is a nominal 50 tokens/s at 1x.

Each submitted job takes the next output; once they run out, the last one repeats. The job's
prompt is not looked at (only counted). `speed` (may be changed while playing): 0 or None
plays instantly, 1.0 at the recorded pace (a token's recorded time since its request started,
so the original time to first token is kept), N is N times faster. Cancel is checked before
every token and interrupts the wait for the next one; `max_tokens` ends with "length"; stop
strings are applied as the live engine does (engine.queued.StopGate). The pace runs on an
injected `clock` and `pause` (time.perf_counter and a wait on the job's cancel event by
default), so tests check it exactly. See docs/design.md, section 5 "Engines, service, pipeline".
"""

from __future__ import annotations

import re
import threading
import time
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from engine.base import Job, Timings, Token
from engine.queued import QueuedEngine, StopGate
from engine.recording import is_recording, load_recording

PLAIN_TOKENS_PER_S = 50.0
_PIECE = re.compile(r"\s*\S{1,4}|\s+")


def split_text(text: str) -> list[str]:
    """Deterministic pseudo-tokens; "".join(split_text(s)) == s."""
    return _PIECE.findall(text)


def _piece_id(piece: str) -> int:
    return zlib.crc32(piece.encode("utf-8")) & 0x7FFFFFFF


@dataclass(frozen=True, slots=True)
class ReplayOutput:
    """One output to play: tokens with `t` = seconds since the request started."""

    tokens: tuple[Token, ...]
    reason: str = "stop"
    error: str | None = None
    source: str = ""

    @property
    def text(self) -> str:
        return "".join(tok.text for tok in self.tokens)

    @classmethod
    def from_text(cls, text: str, source: str = "") -> ReplayOutput:
        toks = tuple(
            Token(_piece_id(p), p, (i + 1) / PLAIN_TOKENS_PER_S)
            for i, p in enumerate(split_text(text))
        )
        return cls(toks, "stop", None, source)


def load_outputs(path: Path | str) -> tuple[list[ReplayOutput], str]:
    """The outputs a source gives, and the model name it records ("" for plain text)."""
    path = Path(path)
    if not is_recording(path):
        return [ReplayOutput.from_text(path.read_text(encoding="utf-8"), str(path))], ""
    session = load_recording(path)
    outs = [ReplayOutput(req.tokens, *req.outcome, f"{path}#{req.id}")
            for req in session.requests]
    return outs, session.model


class ReplayEngine(QueuedEngine):
    """The Engine protocol over prepared outputs. See the module docstring."""

    def __init__(
        self,
        sources: Sequence[Path | str],
        *,
        speed: float | None = 0.0,
        name: str | None = None,
        n_ctx: int = 1 << 20,
        clock: Callable[[], float] = time.perf_counter,
        pause: Callable[[threading.Event, float], object] = threading.Event.wait,
    ):
        outputs: list[ReplayOutput] = []
        models: list[str] = []
        for src in sources:
            outs, model = load_outputs(src)
            outputs.extend(outs)
            if model:
                models.append(model)
        if not outputs:
            raise ValueError("nothing to replay: the sources hold no outputs")
        self._outputs = outputs
        self.name = name or (models[0] if models else "replay")
        self.n_ctx = n_ctx
        self.speed = speed
        # Injected so tests run the pacing on a clock of their own: `pause(cancelled, s)`
        # waits up to s seconds of `clock` and returns early once `cancelled` is set.
        self.clock = clock
        self.pause = pause
        self._served = 0  # worker thread only
        self._start_worker("prism-replay")  # nothing to load: ready at once

    @property
    def outputs(self) -> list[str]:
        return [o.text for o in self._outputs]

    # -- any thread ------------------------------------------------------------------------

    def tokenize(self, text: str) -> list[int]:
        return [_piece_id(p) for p in split_text(text)]

    def submit(self, job: Job) -> None:
        if not job.submitted_at:
            job.submitted_at = self.clock()  # queue time on the engine's own clock
        super().submit(job)

    # -- worker thread ---------------------------------------------------------------------

    def _serve(self, job: Job) -> None:
        out = self._outputs[min(self._served, len(self._outputs) - 1)]
        self._served += 1
        self._play(job, out)

    def _play(self, job: Job, out: ReplayOutput) -> None:
        clock = self.clock
        start = clock()
        submitted = job.submitted_at or start
        gate = StopGate(job.stop)
        reason, error = out.reason, out.error
        n_out = 0
        t_first = 0.0
        for tok in out.tokens:
            if job.max_tokens is not None and n_out >= job.max_tokens:
                reason, error = "length", None
                break
            speed = self.speed
            if speed and speed > 0:
                # Waiting on the cancel event, so a cancel interrupts the pause at once.
                self.pause(job.cancelled, max(0.0, start + tok.t / speed - clock()))
            if job.cancelled.is_set():
                reason, error = "cancelled", None
                break
            now = clock()
            t_first = t_first or now
            n_out += 1
            for ready in gate.push(tok.id, tok.text.encode("utf-8"), now, tok.top):
                job.on_token(ready)
            if gate.stopped:
                reason, error = "stop", None
                break
        for ready in gate.finish():
            job.on_token(ready)
        end = clock()
        t_first = t_first or end
        self._finish(
            job,
            reason,
            Timings(
                queue_ms=(start - submitted) * 1000.0,
                prompt_ms=(t_first - start) * 1000.0,
                ttft_ms=(t_first - submitted) * 1000.0,
                decode_ms=(end - t_first) * 1000.0 if n_out else 0.0,
                prompt_tokens=len(self.tokenize(job.prompt)),
                output_tokens=n_out,
            ),
            error,
            stop_sequence=gate.hit,
        )
