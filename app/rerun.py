"""The `prism rerun` verb: send every recorded request again, to another engine, and record it.

    prism rerun RECORDING... (--model B.gguf | --pack P | --template F | --upstream URL)
                [--dialect D] [--same-sampling | --temperature T --seed S]
                [--top-logprobs N] [--out FILE|DIR] [--n-ctx N] [--max-tokens N]

`--max-tokens N` caps every re-run reply (a recorded request that asked for fewer keeps its
own).

Owns `add_arguments`, `run`, `rebuild` (a recorded request as a `ChatRequest` again, with the
sampling overrides), `rerun_requests`, the loop (and `rerun_session`, the loop over one
recording), `service_for` (the service an `EngineChoice` names) and `recorder_for` (a rerun's
recording). The window's *Re-run on…* runs the same loop with the same service on a thread of
its own (app/gui.py), through the loop's hooks: each request is announced before it is sent,
each run once sent, and a stop is asked for between tokens. Each request goes through the same
`Service` that `prism serve` and the window build (app/config.py), so it is rendered with the
other engine's template, generated, parsed, measured and recorded on the same path. What is
sent again: the messages, tools, tool_choice, sampling and seed, thinking and every other
field the request record holds; the request's policy (one call per reply, calls as text) is
read from those as the first time, so the new `Reading` differs only where the other engine's
template or family does. The new recording names the one it re-ran (header `rerun_of`) and,
per request, its original (a `counterpart` record: engine/record/recording.py).

Requests run one after the other (`--parallel 1` unless given): a rerun is a measurement,
and one sequence at a time keeps a seeded request's tokens the same from run to run. Progress
goes to stderr (requests done / total, tokens/s, ETA); at the end, each pair's change, the
most changed first (engine/record/compare.py). Ctrl-C cancels the request in flight and keeps
what was done: every record is on disk as it is written. The loop runs on the caller's thread
(the main thread here, the window's rerun thread there); the engine generates on its own.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
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


def add_arguments(p: argparse.ArgumentParser) -> None:
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
    """One recording re-run: where it went, how many of its requests, and how fast."""

    path: Path | None  # None: not recorded
    done: int
    total: int
    tokens: int
    seconds: float  # from submission to finish, summed over the requests
    failed: int = 0
    interrupted: bool = False

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else 0.0


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
    (a template's refusal is recorded, and named, all the same: engine/service.py).

    Hooks, on this thread: `before(original, request)` just before a request is sent (the
    window links the track its run makes to the original by it), `sent(run)` once it is,
    `stopped()` between requests and once each is sent (true: cancel the one in flight, which
    the caller may also cancel itself, and end). Ctrl-C (KeyboardInterrupt) is a stop too.
    A stop waits for the cancelled run's finish record; the report says `interrupted`."""
    from engine.chat.template import TemplateError
    from engine.service import ContextOverflow

    total = len(requests)
    done = failed = tokens = 0
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
            done += 1
            tokens += len(run.tokens)
            seconds += time.perf_counter() - t0
            if progress is not None:
                progress(progress_line(done, total, tokens, seconds,
                                       time.perf_counter() - started))
        except KeyboardInterrupt:
            interrupted = True
            if run is not None and not run.done:
                run.cancel()
                run.wait(CANCEL_WAIT_S)  # its finish record ("cancelled") is written then
            break
    return RerunReport(recorder.path if recorder is not None else None, done, total, tokens,
                       seconds, failed, interrupted)


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


def _with_template(service: Service, args: argparse.Namespace) -> Service:
    """--template without --upstream: the local model renders with that template."""
    from app.preflight import check_template
    from engine.service import Service

    try:
        text = args.template.read_text(encoding="utf-8")
    except OSError as e:
        raise SystemExit(f"prism rerun: cannot read --template {args.template}: {e}") from None
    pack = check_template(dataclasses.replace(service.pack, template=text, tool_template="",
                                              template_origin=str(args.template)))
    return Service(service.engine, pack, metrics=service.metrics)


def _status(stream: TextIO) -> Callable[[str], None]:
    """Progress on a terminal rewrites one line; anywhere else, one line each."""
    tty = stream.isatty()

    def say(line: str) -> None:
        if tty and line.startswith("rerun: ") and "/" in line.split()[1]:
            stream.write("\r" + line + "\x1b[K")
        else:
            stream.write(line + "\n")
        stream.flush()

    return say


def run(args: argparse.Namespace) -> int:
    _engine_named(args)
    from app.config import build_service
    from engine.record.compare import compare_sessions
    from engine.record.recording import RecordingError, read_session

    sessions = []
    for path in args.recordings:
        try:
            sessions.append((path, read_session(path)))
        except (OSError, RecordingError) as e:
            raise SystemExit(f"prism rerun: cannot read {path}: {e}") from None
    args.no_record = True  # the rerun records to a file of its own, naming the original
    # `--template` is the upstream's option; for a local model the pack renders with it.
    template, args.template = args.template, args.template if args.upstream else None
    if not (args.model or args.pack or args.upstream):
        args.pack = "smollm2"  # --template alone: the default model with that template
    service = build_service(args)
    args.template = template
    if template is not None and not args.upstream:
        service = _with_template(service, args)
    say = _status(sys.stderr)
    status = 0
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
            sys.stderr.write("\n" if sys.stderr.isatty() else "")
            print(f"prism rerun: {path} → {report.path}: {report.done}/{report.total} "
                  f"requests, {report.tokens} tokens, {report.tokens_per_s:.1f} tok/s"
                  + (f", {report.failed} not sent" if report.failed else ""),
                  file=sys.stderr, flush=True)
            for c in compare_sessions(session, read_session(report.path, strict=False),
                                      ("was", "now")):
                print(f"{c.a.id}\t{c.change:.2f}\t{c.changed()}\t{c.summary()}")
            if report.interrupted:
                print("prism rerun: interrupted; the requests done are kept in "
                      f"{report.path}", file=sys.stderr, flush=True)
                status = 130
                break
    finally:
        service.engine.close()
    return status
