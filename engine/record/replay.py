"""ReplayEngine: plays recorded or hand-written model outputs through the Engine protocol.

Owns a daemon worker thread ("prism-replay") that serves jobs FIFO, like LlamaEngine, and
calls the job's callbacks on it. Everything downstream (parser, API, GUI, metrics) cannot tell
a replay from a live model, which is the point: demos, tests and bug reports without a model.

Sources, in order, each giving one or more outputs:
- a Prism recording (engine/record/recording.py; recognised by its header line, whatever the file is
  called): one output per recorded request, in file order, with the recorded token texts,
  ids, times and finish reason, the conversation it answered, and the start state and family
  it was parsed with. A damaged recording plays what precedes the damage (a warning is
  logged); a request the file ends before plays what was recorded and finishes with "length",
  and so does one a stopping server cut (`"cancelled_by": "shutdown"`): the client that sent it
  did not cancel, so a replay must not answer it as cancelled (a 503).
- any other file: plain UTF-8 text taken as one whole model output, finishing with "stop".
  It is cut into tokens deterministically by `split_text`: each piece is optional leading
  whitespace plus up to 4 non-space characters (a long word becomes several pieces; trailing
  whitespace is a piece of its own), about the size of real BPE tokens. Piece ids are a CRC32
  of the piece, and the pace is a nominal 50 tokens/s at 1x.

Which output a job gets: the service calls `prepare(job, request)` before submitting. A
recorded output goes to the request with the same conversation (roles, texts and tool calls,
not call ids or reasoning), else to one with the same last user message, the first unused in
order (once all are used, the last match again); the service then parses it with its recorded
start state and family. Outputs with no conversation (plain text, recorded requests without
messages) are dealt in order, the last one repeating; with `tools_only` only to requests that
declare tools. With `calls_need_tools` (`prism serve`'s default; `--replay-strict-order` turns
it off) a plain-text output that holds a tool call (read in `family`) waits for the next
request that declares tools: opencode sends a title request with no tools beside its first
turn, and a title that takes the call leaves the agent with nothing to run (issue 24, item 3).
A request that matches nothing is refused in `prepare` with `ReplayMiss`, before anything is
queued, so every API answers it with its 400 and message (issue 24, item 1), never with
someone else's output. A job submitted without `prepare` takes the next unused output in
order.

Token counts: the job's prompt is only counted. With a `tokenizer` (the app passes the pack's
GGUF vocabulary, engine/backends/llama/vocab.py, which this package may not import) the counts
are that vocabulary's; without one, `split_text`'s pieces, 5-10% more than a real BPE
tokenizer makes of the captured clients' prompts. `counts_estimated` says which (shown in
/props and the recording's header), since a client sizes its compaction by
`usage.prompt_tokens` (issue 24, item 2).

`speed` (may be changed while playing): 0 or None plays instantly, 1.0 at the recorded pace (a
token's recorded time since its request started, so the original time to first token is kept),
N is N times faster. Cancel is checked before every token and interrupts the wait for the next
one; `max_tokens` ends with "length"; stop strings are applied as the live engine does
(engine.backends.queued.StopGate). The pace runs on an injected `clock` and `pause`
(time.perf_counter and a wait on the job's cancel event by default), so tests check it exactly. See
docs/design.md, section 5 "Engines, service, pipeline".
"""

from __future__ import annotations

import contextlib
import json
import re
import threading
import time
import weakref
import zlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from engine.backends.base import Job, Timings, Token
from engine.backends.queued import QueuedEngine, StopGate
from engine.chat.request import ChatRequest
from engine.parse import families
from engine.parse.events import TOOL_CALL
from engine.parse.reading import Reading
from engine.record.reader import is_recording, load_recording
from engine.record.recording import SHUTDOWN, request_to_dict

PLAIN_TOKENS_PER_S = 50.0
_PIECE = re.compile(r"\s*\S{1,4}|\s+")


def split_text(text: str) -> list[str]:
    """Deterministic pseudo-tokens; "".join(split_text(s)) == s."""
    return _PIECE.findall(text)


class ReplayMiss(ValueError):
    """No output of the replay answers this request (the message says why). Raised by
    `prepare`, before the job is queued: the API answers it as a 400 (app/api/errors.py)."""


def holds_call(text: str, family: str = "auto") -> bool:
    """Whether a whole plain-text output holds a tool call, read in `family` from the
    reasoning (as a thinking model's answer begins: a call written there is still a call)."""
    parser = Reading(family=family).parser()
    return any(ev.kind == TOOL_CALL for ev in parser.feed(text) + parser.finish())


def _piece_id(piece: str) -> int:
    return zlib.crc32(piece.encode("utf-8")) & 0x7FFFFFFF


def _turns(messages: Iterable[dict]) -> tuple[tuple, ...]:
    """A conversation as matching compares it: each turn's role, text and calls (names and
    arguments), without call ids (a replay draws new ones, so a client sends back other ids
    than the recording holds) and without reasoning (clients often drop it)."""
    turns = []
    for m in messages:
        calls = []
        for call in m.get("tool_calls") or ():
            fn = call.get("function") or {}
            args = fn.get("arguments")
            if isinstance(args, str):
                with contextlib.suppress(ValueError):
                    args = json.loads(args)
            calls.append((fn.get("name"), json.dumps(args, sort_keys=True)))
        turns.append((m.get("role"), str(m.get("content") or "").strip(), tuple(calls)))
    return tuple(turns)


def _last_user(turns: tuple[tuple, ...]) -> str | None:
    return next((text for role, text, _ in reversed(turns) if role == "user"), None)


@dataclass(frozen=True, slots=True)
class ReplayOutput:
    """One output to play: tokens with `t` = seconds since the request started. An output from
    a recording also carries the conversation it answered (for matching) and the start state
    and family it was parsed with."""

    tokens: tuple[Token, ...]
    reason: str = "stop"
    error: str | None = None
    source: str = ""
    turns: tuple[tuple, ...] = ()  # () for plain text, or a recorded request without messages
    start_state: str | None = None  # None: plain text, parsed as the pack says
    family: str = ""

    @property
    def text(self) -> str:
        return "".join(tok.text for tok in self.tokens)

    @property
    def last_user(self) -> str | None:
        return _last_user(self.turns)

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
    outs = []
    for req in session.requests:
        # A request a crash or a stopping server cut off replays what was recorded of it, as
        # a length-capped answer: the client gets the text, not an error (or a cancel) its
        # client never caused live.
        cut = req.finish is None or (req.finish == "cancelled" and req.cancelled_by == SHUTDOWN)
        reason, error = ("length", None) if cut else req.outcome
        outs.append(ReplayOutput(
            req.tokens, reason, error, f"{path}#{req.id}",
            turns=_turns(req.request.get("messages") or ()),
            # Read as it was read when recorded: its reading's start and family (a family
            # the file does not name, or this version does not know: the pack's).
            start_state=req.reading.start,
            family=req.reading.family if families.known(req.family) else "",
        ))
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
        tools_only: bool = False,
        calls_need_tools: bool = False,
        family: str = "auto",
        tokenizer: Callable[[str], Sequence[int]] | None = None,
        counts_estimated: bool | None = None,
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
        self.tools_only = tools_only
        # Plain-text outputs holding a call, which wait for a request with tools (indices).
        self._calls = (frozenset(i for i, o in enumerate(outputs)
                                 if o.start_state is None and holds_call(o.text, family))
                       if calls_need_tools else frozenset())
        self._tokenizer = tokenizer
        # A given tokenizer counts as the model would, unless the caller says it is another
        # model's (the default model's vocabulary standing in for a pack without a GGUF).
        self.counts_estimated = tokenizer is None if counts_estimated is None else counts_estimated
        self._lock = threading.Lock()  # the choice of outputs: submitting threads and worker
        self._used: set[int] = set()  # indices of outputs handed out
        # By prepare(): the output chosen. Weak, so a job that never reaches the
        # worker (cancelled while waiting, or the engine closed) leaves nothing behind.
        self._chosen: weakref.WeakKeyDictionary[Job, ReplayOutput] = (
            weakref.WeakKeyDictionary())
        self._start_worker("prism-replay")  # nothing to load: ready at once

    @property
    def outputs(self) -> list[str]:
        return [o.text for o in self._outputs]

    # -- any thread ------------------------------------------------------------------------

    def tokenize(self, text: str) -> list[int]:
        if self._tokenizer is not None:
            return list(self._tokenizer(text))
        return [_piece_id(p) for p in split_text(text)]

    def submit(self, job: Job) -> None:
        if not job.submitted_at:
            job.submitted_at = self.clock()  # queue time on the engine's own clock
        super().submit(job)

    def prepare(self, job: Job, request: ChatRequest) -> tuple[str, str] | None:
        """Choose the job's output for this request (see the module docstring) and return the
        (start state, family) a recorded one was parsed with ("" family: the pack's), so the
        service parses it as it was parsed live; None for plain text. Raises ReplayMiss when
        no output answers the request."""
        with self._lock:
            choice = self._choose(request)
            if isinstance(choice, str):
                raise ReplayMiss(choice)
            self._chosen[job] = choice
        if choice.start_state:
            return choice.start_state, choice.family
        return None

    def _choose(self, request: ChatRequest) -> ReplayOutput | str:
        turns = _turns(request_to_dict(request)["messages"])
        last = _last_user(turns)
        outs = self._outputs
        recorded = [i for i, o in enumerate(outs) if o.turns]
        for same in (lambda o: o.turns == turns, lambda o: last is not None
                     and o.last_user == last):
            found = [i for i in recorded if same(outs[i])]
            if found:
                return self._hand_out(found)
        # Outputs with no conversation to match keep their order: plain text, and recorded
        # requests without messages.
        dealt = [i for i, o in enumerate(outs) if not o.turns]
        if dealt and self.tools_only and not request.tools:
            dealt = [i for i in dealt if outs[i].start_state is not None]
            if not dealt:
                return ("replay (--replay-tools-only): plain-text outputs go only to requests "
                        "that declare tools, and this one declares none")
        if dealt:
            nxt = self._next(dealt)
            if nxt in self._calls and not request.tools:
                name = Path(outs[nxt].source).name or f"#{nxt + 1}"  # never a local path
                return (f"replay: the next output ({name}) holds a "
                        "tool call, so it goes to the next request that declares tools, and "
                        "this one declares none (--replay-strict-order hands outputs out in "
                        "order whatever the request)")
            return self._hand_out(dealt)
        said = f"{last[:80]!r}" if last is not None else "none"
        return (f"replay: no recorded request has this conversation or its last user message "
                f"({said}); the recording holds {len(recorded)} request(s)")

    def _next(self, candidates: list[int]) -> int:
        """The first unused candidate; once all are used, the last one again (a client that
        repeats a request gets the same answer)."""
        return next((i for i in candidates if i not in self._used), candidates[-1])

    def _hand_out(self, candidates: list[int]) -> ReplayOutput:
        i = self._next(candidates)
        self._used.add(i)
        return self._outputs[i]

    # -- worker thread ---------------------------------------------------------------------

    def _serve(self, job: Job) -> None:
        with self._lock:
            choice = self._chosen.pop(job, None)
            if choice is None:  # submitted without a request: the next output in order
                choice = self._hand_out(list(range(len(self._outputs))))
        self._play(job, choice)

    def _prompt_tokens(self, job: Job) -> int:
        # The service tokenized the prompt already (with this engine's `tokenize`).
        return len(job.prompt_ids) if job.prompt_ids else len(self.tokenize(job.prompt))

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
            for ready in gate.push(tok.id, tok.text.encode("utf-8"), now, tok.top,
                                     tok.guided, tok.forced):
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
                prompt_tokens=self._prompt_tokens(job),
                output_tokens=n_out,
            ),
            error,
            stop_sequence=gate.hit,
        )
