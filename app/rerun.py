"""The `prism rerun` verb: send every recorded request again, to another engine, and record it.

    prism rerun RECORDING... (--model B.gguf | --pack P | --template F | --upstream URL)
                [--family D] [--same-sampling | --temperature T --seed S]
                [--top-logprobs N] [--out FILE|DIR] [--n-ctx N] [--max-tokens N]

`--max-tokens N` caps every re-run reply (a recorded request that asked for fewer keeps its
own). `--template F` without `--upstream` renders with F on the local model (the default one,
or `--model`/`--pack`'s): app/config.py.

Owns `add_arguments`, `run`, `read_recording`, `failure_summary`, `exit_status`, `rebuild` (a
recorded request as a `ChatRequest` again, with the sampling overrides), `rerun_requests`, the
loop (and `rerun_session`, the loop over one recording), `service_for` (the service an
`EngineChoice` names) and `recorder_for` (a rerun's recording). The window's *Re-run on…* runs
the same loop with the same service on a thread of its own (app/gui.py), through the loop's
hooks: each request is announced before it is sent, each run once sent, and a stop is asked for
between tokens. Each request goes through the same `Service` that `prism serve` and the window
build (app/config.py), so it is rendered with the other engine's template, generated, parsed,
measured and recorded on the same path. What is sent again: the messages, tools, tool_choice,
sampling and seed, thinking and every other field the request record holds; the request's policy
(one call per reply, calls as text) is read from those as the first time, so the new `Reading`
differs only where the other engine's template or family does. The new recording names the one
it re-ran (header `rerun_of`) and, per request, its original (a `counterpart` record:
engine/record/recording.py).

Requests run one after the other (`--parallel 1` unless given): a rerun is a measurement,
and one sequence at a time keeps a seeded request's tokens the same from run to run. Progress
goes to stderr (requests done / total, tokens/s, ETA); at the end, each pair's change, the
most changed first (engine/record/compare.py). A request that fails (refused, or ended in an
error: the upstream unreachable, its 5xx, a cut stream, a timeout) is said on stderr as it
happens, the rest go on, and a closing line sums the failures up; the exit status says whether
none, some or all failed (`EXIT_OK` below). A recording cut mid-line (its writer killed) is
re-run up to the damage, with a warning naming the line. Ctrl-C cancels the request in flight
and keeps what was done: every record is on disk as it is written. SIGTERM and SIGHUP stop it
the same way, and so does SIGINT when the shell started it with SIGINT ignored (a script's
background job), as `prism serve` takes its stops (`_stops`). The loop runs on the
caller's thread (the main thread here, the window's rerun thread there); the engine generates
on its own.
"""

from __future__ import annotations

import argparse
import dataclasses
import signal
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from app.config import add_engine_arguments

if TYPE_CHECKING:  # `prism parse` shares the parser: the engine loads only for this verb
    from engine.chat.request import ChatRequest
    from engine.record.recording import RecordedRequest, Recorder, Session
    from engine.service import Run, Service
    from inspector.rerun import EngineChoice

CANCEL_WAIT_S = 10.0  # after Ctrl-C: how long the cancelled request may take to finish
# Exit status, for scripts (docs/rerun.md, `prism rerun --help`): every request re-ran; some failed
# (the others re-ran and are recorded); every one failed, or nothing could run (a usage error,
# a recording, model or template that cannot be read); Ctrl-C.
EXIT_OK, EXIT_SOME, EXIT_NONE, EXIT_INTERRUPTED = 0, 1, 2, 130
EXIT_STATUS = ("exit status: 0 every request re-ran; 1 some failed (the rest re-ran); 2 every "
               "request failed (unreachable upstream, HTTP errors, cut streams, timeouts, a "
               "model that does not load), or nothing ran (a usage error, a recording, model "
               "or template that cannot be read); 130 interrupted (Ctrl-C, SIGTERM). Failures are "
               "summed up on stderr: 'N of M requests failed: why'.")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.epilog = EXIT_STATUS
    p.add_argument("recordings", nargs="+", type=Path, metavar="RECORDING",
                   help="recordings to re-run (prism-session JSONL files)")
    add_engine_arguments(p)
    p.set_defaults(parallel=1)
    s = p.add_argument_group("sampling (default: as recorded, seed included)")
    s.add_argument("--same-sampling", action="store_true",
                   help="send each request's recorded sampling and seed unchanged (the default)")
    s.add_argument("--temperature", type=float, help="this temperature for every request")
    s.add_argument("--seed", type=int, help="this seed for every request")
    s.add_argument("--top-logprobs", type=int, metavar="N",
                   help="record N alternatives per token (default: as recorded), so the "
                   "compare view can show each side's probability where the runs part")
    p.add_argument("--out", type=Path, metavar="FILE|DIR",
                   help="the new recording (with several RECORDINGs, a folder for one each; "
                   "default: the recordings folder)")


@dataclass(frozen=True, slots=True)
class Overrides:
    """What the rerun changes in every request (None: as recorded)."""

    temperature: float | None = None
    seed: int | None = None
    top_logprobs: int | None = None
    max_tokens: int | None = None  # a cap: the recorded max_tokens where it is lower


@dataclass(frozen=True, slots=True)
class RerunReport:
    """One recording re-run: where it went, how many of its requests, and how fast. `done`
    counts the requests that finished (stop, length, tool calls); `failed` those the other
    engine refused before sending (its template, its context); `errored` those sent that
    ended in an error (an upstream unreachable, its 5xx, a cut stream, a timeout, a model
    that did not load). `errors`: (original id, why) for each of the last two kinds."""

    path: Path | None  # None: not recorded
    done: int
    total: int
    tokens: int
    seconds: float  # from submission to finish, summed over the requests
    failed: int = 0
    interrupted: bool = False
    errored: int = 0
    errors: tuple[tuple[str, str], ...] = ()

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else 0.0

    @property
    def unsuccessful(self) -> int:
        """Requests that did not re-run: refused before sending, or ended in an error."""
        return self.failed + self.errored


def rebuild(rec: RecordedRequest, overrides: Overrides = Overrides()) -> ChatRequest:
    """A recorded request as a ChatRequest again. Fields this version does not know (a newer
    file) are dropped; older files' names are taken as `request_from_dict` reads them."""
    from engine.chat.request import ChatRequest
    from engine.record.recording import request_from_dict

    known = {f.name for f in dataclasses.fields(ChatRequest)} | {"dialect"}
    request = request_from_dict({k: v for k, v in rec.request.items() if k in known})
    sampling = request.sampling
    if overrides.temperature is not None:
        sampling = dataclasses.replace(sampling, temperature=overrides.temperature)
    if overrides.seed is not None:
        sampling = dataclasses.replace(sampling, seed=overrides.seed)
    top = request.top_logprobs if overrides.top_logprobs is None else overrides.top_logprobs
    cap = overrides.max_tokens
    most = request.max_tokens if cap is None else min(request.max_tokens or cap, cap)
    # `model` named the original's engine; the other engine answers as itself.
    return dataclasses.replace(request, sampling=sampling, top_logprobs=top, max_tokens=most,
                               model="")


def _clock(seconds: float) -> str:
    s = int(seconds + 0.5)
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}" if s >= 3600 else \
        f"{s // 60}:{s % 60:02d}"


def progress_line(done: int, total: int, tokens: int, seconds: float, elapsed: float) -> str:
    rate = tokens / seconds if seconds > 0 else 0.0
    eta = elapsed / done * (total - done) if done else 0.0
    return f"rerun: {done}/{total} requests · {rate:.1f} tok/s · ETA {_clock(eta)}"


def rerun_session(service: Service, session: Session, recorder: Recorder | None, *,
                  overrides: Overrides = Overrides(),
                  progress: Callable[[str], None] | None = None) -> RerunReport:
    """`rerun_requests` over every request of one recording."""
    return rerun_requests(service, session.requests, recorder, overrides=overrides,
                          progress=progress)


def rerun_requests(service: Service, requests: Sequence[RecordedRequest],
                   recorder: Recorder | None, *, overrides: Overrides = Overrides(),
                   progress: Callable[[str], None] | None = None,
                   before: Callable[[RecordedRequest, ChatRequest], None] | None = None,
                   sent: Callable[[Run], None] | None = None,
                   stopped: Callable[[], bool] | None = None) -> RerunReport:
    """Send each request to `service`, one at a time, naming each new request's original in
    `recorder` (the service's; None: not recorded). A request the other engine refuses (its
    template fails, or the prompt does not fit its context) is counted as failed and skipped
    (a template's refusal is recorded, and named, all the same: engine/service.py); one that
    ends in an error is counted as errored, its reason said on `progress`, and the loop goes
    on to the next.

    Hooks, on this thread: `before(original, request)` just before a request is sent (the
    window links the track its run makes to the original by it), `sent(run)` once it is,
    `stopped()` between requests and once each is sent (true: cancel the one in flight, which
    the caller may also cancel itself, and end). Ctrl-C (KeyboardInterrupt) is a stop too.
    A stop waits for the cancelled run's finish record; the report says `interrupted`."""
    from engine.chat.template import TemplateError
    from engine.service import ContextOverflow

    total = len(requests)
    done = failed = errored = tokens = 0
    errors: list[tuple[str, str]] = []
    seconds = 0.0
    started = time.perf_counter()
    interrupted = False
    for rec in requests:
        run = None
        t0 = time.perf_counter()
        try:
            if stopped is not None and stopped():
                interrupted = True
                break
            request = rebuild(rec, overrides)
            if before is not None:
                before(rec, request)
            try:
                run = service.submit(request)
            except (TemplateError, ContextOverflow) as e:
                failed += 1
                errors.append((rec.id, str(e)))
                refused = getattr(e, "request_id", "")  # recorded: name its original too
                if refused and recorder is not None:
                    recorder.counterpart(refused, rec.id)
                if progress is not None:
                    progress(f"rerun: {rec.id} not sent: {e}")
                continue
            if recorder is not None:
                recorder.counterpart(run.id, rec.id)
            if sent is not None:
                sent(run)
            if stopped is not None and stopped():
                raise KeyboardInterrupt  # asked while it was being sent: as Ctrl-C then
            run.wait()
            if run.finish is not None and run.finish.reason == "cancelled" and \
                    stopped is not None and stopped():
                interrupted = True  # the caller cancelled it: a stop, not a request done
                break
            if run.finish is not None and run.finish.reason == "error":
                errored += 1
                why = run.finish.error or "the engine reported an error"
                errors.append((rec.id, why))
                if progress is not None:
                    progress(f"rerun: {rec.id} failed: {why}")
                continue
            done += 1
            tokens += len(run.tokens)
            seconds += time.perf_counter() - t0
            if progress is not None:
                progress(progress_line(done + failed + errored, total, tokens, seconds,
                                       time.perf_counter() - started))
        except KeyboardInterrupt:
            interrupted = True
            if run is not None and not run.done:
                run.cancel()
                run.wait(CANCEL_WAIT_S)  # its finish record ("cancelled") is written then
            break
    return RerunReport(recorder.path if recorder is not None else None, done, total, tokens,
                       seconds, failed, interrupted, errored, tuple(errors))


def service_for(choice: EngineChoice, *, parallel: int = 1) -> Service:
    """The service `prism rerun` builds for an engine named by the window's *Re-run on…*
    (a GGUF file, a built-in pack, an upstream URL), unrecorded: the rerun records to a file
    of its own (`recorder_for`). Loads the model (or asks the upstream): not on the GUI
    thread. A bad choice is a SystemExit with the reason, as on the command line."""
    from app.config import build_service

    p = argparse.ArgumentParser(prog="prism rerun", add_help=False)
    add_engine_arguments(p)
    p.set_defaults(parallel=parallel)
    args = p.parse_args([*choice.argv(), "--no-record"])
    return build_service(args)


def recorder_for(service: Service, path: Path | None, rerun_of: str = "") -> Recorder:
    """A rerun's recording: naming what generated it (so `prism stats` groups it) and, when
    it re-runs a whole recording, that recording (`rerun_of`). `path` None: a new file in the
    recordings folder."""
    from engine.record.model_info import LOCAL, describe
    from engine.record.recording import Recorder

    base = getattr(service.engine, "base", "")
    return Recorder(path, model=service.engine.name, pack=service.pack.name, upstream=base,
                    rerun_of=rerun_of,
                    info=describe(service.pack, base or LOCAL, service.engine.name).to_dict())


def _engine_named(args: argparse.Namespace) -> None:
    if not (args.model or args.pack or args.template or args.upstream):
        raise SystemExit("prism rerun: say which engine to re-run on: --model FILE.gguf, "
                         "--pack NAME, --template FILE or --upstream URL")
    if args.replay:
        raise SystemExit("prism rerun: --replay plays recordings; re-run them on a model")
    if args.same_sampling and (args.temperature is not None or args.seed is not None):
        raise SystemExit("prism rerun: --same-sampling keeps the recorded sampling; it takes "
                         "no --temperature or --seed")


def _out_path(args: argparse.Namespace, source: Path) -> Path | None:
    if args.out is None:
        return None  # the Recorder picks a new file in the recordings folder
    if len(args.recordings) == 1 and not args.out.is_dir():
        return args.out
    return args.out / f"{source.stem}.rerun.jsonl"


def _status(stream: TextIO) -> Callable[[str], None]:
    """Progress on a terminal rewrites one line; anywhere else, one line each."""
    tty = stream.isatty()

    def say(line: str) -> None:
        if tty and line.startswith("rerun: ") and "/" in line.split()[1]:
            stream.write("\r" + line + "\x1b[K")
        else:  # on a terminal, over the progress line: it is rewritten below this one
            stream.write(("\r\x1b[K" if tty else "") + line + "\n")
        stream.flush()

    return say


def read_recording(path: Path, say: Callable[[str], None]) -> Session:
    """A recording to re-run. One damaged past its header (its writer killed mid-line) gives
    the requests before the damage, with a warning naming the line, as `prism stats` and
    replay read it; a file that is no recording at all is refused."""
    from engine.record.reader import read_session
    from engine.record.recording import RecordingError

    try:
        return read_session(path)
    except OSError as e:
        raise SystemExit(f"prism rerun: cannot read {path}: {e.strerror or e}") from None
    except RecordingError as e:
        if e.line <= 1:
            raise SystemExit(f"prism rerun: cannot read {path}: {e}") from None
        n = len(e.partial.requests)
        say(f"prism rerun: warning: {path}: {e}; re-running the {n} request"
            f"{'' if n == 1 else 's'} before line {e.line}")
        return e.partial


def failure_summary(errors: Sequence[tuple[str, str]], total: int, shown: int = 3) -> str:
    """The closing line when requests failed: how many of how many, and why (the commonest
    reasons first, each with its count)."""
    counts = Counter(why for _, why in errors)
    parts = [why if k == 1 else f"{why} (x{k})" for why, k in counts.most_common(shown)]
    more = len(counts) - shown
    return (f"prism rerun: {len(errors)} of {total} requests failed: " + "; ".join(parts)
            + (f"; and {more} other reason{'' if more == 1 else 's'}" if more > 0 else ""))


def exit_status(failed: int, total: int) -> int:
    """EXIT_OK when every request re-ran, EXIT_SOME when some failed, EXIT_NONE when all did."""
    if not failed:
        return EXIT_OK
    return EXIT_NONE if failed >= total else EXIT_SOME


def _loaded(service: Service) -> None:
    """A local model loads on the engine's thread: one llama.cpp refuses is said now, once,
    not as every request's failure."""
    engine = service.engine
    ready = getattr(engine, "ready", None)
    if ready is None or getattr(engine, "base", ""):  # an upstream: each request says
        return
    ready.wait()
    if engine.load_error:
        engine.close()
        raise SystemExit(f"prism rerun: cannot load the model: {engine.load_error}")


def run(args: argparse.Namespace) -> int:
    """The verb; its exit status is documented at EXIT_OK. A reason given as SystemExit
    (a usage error, a recording, model or template that cannot be read) is one line on
    stderr and EXIT_NONE: nothing re-ran."""
    try:
        return _run(args)
    except SystemExit as e:
        if not isinstance(e.code, str):
            raise
        print(e.code, file=sys.stderr, flush=True)
        return EXIT_NONE


def _stop(signum: int, frame) -> None:
    # The first stop cancels the request in flight, as Ctrl-C does; the clean-up it starts (the
    # cancelled run's finish record, the engine's close) is bounded, so later ones are ignored.
    for sig in _STOPS:
        signal.signal(sig, signal.SIG_IGN)
    raise KeyboardInterrupt


_STOPS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def _stops() -> None:
    for sig in _STOPS:
        signal.signal(sig, _stop)


def _run(args: argparse.Namespace) -> int:
    _stops()
    _engine_named(args)
    from app.config import build_service
    from engine.record.compare import compare_sessions
    from engine.record.reader import read_session

    say = _status(sys.stderr)
    sessions = [(path, read_recording(path, say)) for path in args.recordings]
    args.no_record = True  # the rerun records to a file of its own, naming the original
    service = build_service(args)  # --template without --upstream: the local model's
    _loaded(service)
    total, errors, status = 0, [], EXIT_OK
    try:
        for path, session in sessions:
            recorder = recorder_for(service, _out_path(args, path), str(path.resolve()))
            service.recorder = recorder
            try:
                report = rerun_session(
                    service, session, recorder,
                    overrides=Overrides(args.temperature, args.seed, args.top_logprobs,
                                        args.max_tokens),
                    progress=say)
            finally:
                recorder.close()
            total += report.total
            errors += report.errors
            sys.stderr.write("\n" if sys.stderr.isatty() else "")
            print(f"prism rerun: {path} → {report.path}: {report.done}/{report.total} "
                  f"requests, {report.tokens} tokens, {report.tokens_per_s:.1f} tok/s"
                  + (f", {report.unsuccessful} failed" if report.unsuccessful else ""),
                  file=sys.stderr, flush=True)
            for c in compare_sessions(session, read_session(report.path, strict=False),
                                      ("was", "now")):
                print(f"{c.a.id}\t{c.change:.2f}\t{c.changed()}\t{c.summary()}")
            if report.interrupted:
                print("prism rerun: interrupted; the requests done are kept in "
                      f"{report.path}", file=sys.stderr, flush=True)
                status = EXIT_INTERRUPTED
                break
    finally:
        service.engine.close()
    if errors:
        print(failure_summary(errors, total), file=sys.stderr, flush=True)
    return status or exit_status(len(errors), total)
