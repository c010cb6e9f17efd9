"""Session recordings: a versioned, human-readable JSONL log of requests and their tokens.

Owns the file format (docs/design.md, section 6 "Recordings"): its records and the helpers
both sides use, and `Recorder` (writing); engine/record/reader.py reads it (`read_session`,
`is_recording`, `load_recording`). The recorder is called from whichever thread produces a
record (the service, the pipeline per token and at finish), so every write takes a lock; each
record is one line, written and flushed as it happens: a crash loses nothing already written
(no fsync per token, which costs milliseconds: a power cut may still lose the tail). Each
session is a file of its own, created exclusively, readable by its owner only (0600, in a 0700
folder): recordings hold whole conversations.

Format, version 1 (one JSON object per line):

    {"format": "prism-session", "version": 1, "created": iso8601, "model": str, "pack": str}
    {"type": "request", "id", "t", "request": {...}, "prompt", "start_state", "api",
     "family", "stream_tools", "tools": [...], "reading": {...}}
    {"type": "token", "id", "i", "tok", "text", "t", ["top": [[text, logprob], ...]],
     ["guided": text], ["forced": true]}
    {"type": "finish", "id", "reason", "timings": {...}, "result": {...} | null, ["error"],
     ["stop_sequence"], ["status"], ["prefix"], ["refused"], ["cancelled_by"]}

The header's `model_info` (engine/record/model_info.py; absent in older files) names what
generated: the model file, its quant, the family, the template's hash and the engine. A finish
names the stop string that ended it (`stop_sequence`) and an upstream's HTTP status (`status`)
when there was one; older files have neither (the ledger and the verdicts read them as absent).
A finish's timings hold `cached_tokens` (reused, from a slot or from disk) and `disk_tokens` (of
those, loaded from disk; absent, so 0, in older files): the slot's share and the computed rest
follow (`Timings.slot_tokens`, `Timings.computed_tokens`). Its `prefix`, where the llama engine
gave one, is where the prompt left the best cached prefix (`PrefixMatch`, issue 20: `held`,
`source`, `prompt_char`, `cached_text`, `prompt_text`; engine/record/forensics.py).
A request refused before generation (the chat template raised: `TemplateError`) is recorded
all the same, by the service: its request record, with an empty prompt, then at once a finish
with reason "error", the refusal's message as `error`, and `"refused": "template"` (absent in
older files, which recorded no refused request at all).
A "cancelled" finish written once the process began to stop (`Recorder.stopping`: a signal,
the window closing) says so, `"cancelled_by": "shutdown"`: the server cut the request, its
client did not give up, so the verdicts do not blame the client and a replay plays what was
recorded, as it does for a request a crash cut off. Absent: the client cancelled (or an older
file, which could not tell the two apart).
    {"type": "counterpart", "id", "of"}  # a rerun's request: `of` is the original's id
    {"type": "model", "event", "model", "t", ["reason"], ["error"], ["memory"]}

A server with several models (engine/catalog.py) records each model's `event` (loading,
loaded, failed, unloaded) as it happens: `t` in seconds since the recorder opened, as a
request's; an unload's `reason` (evicted, ttl, asked, closed), a failure's `error`, the bytes
the model takes (`memory`). Not tied to a request, and skipped by readers that predate it.

A recording made by `prism rerun` (app/rerun.py) names the recording it re-ran in its header,
`"rerun_of": path`, and each re-run request's original with a `counterpart` record right after
its request record (a record type of its own, so readers that predate it skip it).

A token's `guided` (issue 22; absent in older files and on every token the model wrote itself,
which keeps files small) is the text of the token the model drew where the call guard
(engine/backends/llama/guard.py) made it take this one instead: playback shows it, the ledger
counts it. A token's `forced` (absent unless true, and in older files) marks a token of the
reasoning budget's close (engine/backends/llama/budget.py): appended by the engine, not drawn;
the pipeline shows a `reasoning_budget` event where the first of them stands.

A request's `reading` is how its output is read (engine/parse/reading.py, `Reading.to_dict`):
the parser's settings and the request's policy (one call per reply, calls as text). Files
written before it existed have none; their reading is rebuilt from `start_state`, `family`,
`stream_tools`, `tools` and the request, as every player rebuilt it then. Those fields are still
written, for readers that predate `reading`.

Times: a request's `t` is seconds since the recorder opened; a token's `t` is seconds since its
request started (submission), so replaying at 1x reproduces time to first token and pacing.
Records of a type this reader does not know are skipped (room for additions within version 1);
anything else that does not fit is damage and raises `RecordingError` with its line number.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import json
import logging
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.backends.base import Finish, PrefixMatch, Timings, Token
from engine.chat.request import STREAM_TOOLS, ChatRequest, Message, Sampling, one_call_only
from engine.chat.special import PromptMarks
from engine.parse.events import ParseResult
from engine.parse.families import NAMES as FAMILIES
from engine.parse.reading import Reading
from engine.record.forensics import prefix_to_dict

log = logging.getLogger("prism")

# Recordings hold whole conversations: only their owner may read them.
_FILE_MODE = 0o600
_DIR_MODE = 0o700

FORMAT = "prism-session"
VERSION = 1
TEMPLATE = "template"  # a finish's `refused`: the chat template refused the request
SHUTDOWN = "shutdown"  # a finish's `cancelled_by`: the process stopping cut the request


class RecordingError(ValueError):
    """A damaged recording. `line` is the 1-based line number at fault; `partial` is the
    session built from every line before it."""

    def __init__(self, message: str, line: int, partial: Session):
        super().__init__(f"line {line}: {message}")
        self.line = line
        self.partial = partial


@dataclass(frozen=True, slots=True)
class OutputSummary:
    """A request's output read without its tokens (`read_session(tokens=False)`, for the
    ledger): the text as streamed, how many tokens wrote it, the first and last token's `t`,
    how many of them the call guard chose (`guided`) and how many the reasoning budget's
    close appended (`forced`)."""

    text: str = ""
    n: int = 0
    first_t: float = 0.0
    last_t: float = 0.0
    guided: int = 0
    forced: int = 0


@dataclass(frozen=True, slots=True)
class RecordedRequest:
    """One recorded request. `reading` is how its output was read (rebuilt for older files);
    `family` is the family as the file names it ("" in the oldest files, and possibly one this
    version does not know), so a player can tell when to fall back to the pack's."""

    id: str
    request: dict
    prompt: str
    reading: Reading = field(default_factory=Reading)
    tokens: tuple[Token, ...] = ()
    finish: str | None = None  # None: the file ends before this request finished
    timings: Timings | None = None
    result: dict | None = None
    api: str = ""  # the client the request came from (openai, anthropic, gui, ...)
    t: float = 0.0
    family: str = ""  # the family it was parsed with ("" in older files)
    error: str | None = None
    content_specials: tuple[tuple[int, int], ...] = ()  # special tokens from message content
    special_escaped: bool = False  # tokenized as text (--escape-special)
    stop_sequence: str | None = None  # the stop string that ended it (None: none, or older)
    status: int | None = None  # an upstream's HTTP status behind an "error"
    counterpart: str = ""  # a rerun's request: the id of the request it re-ran
    prefix: PrefixMatch | None = None  # where its prompt left the cache (None: not recorded)
    refused: str = ""  # refused before generation, and by what: "template" ("" otherwise)
    # Who cancelled a "cancelled" finish: "shutdown" (the server stopping), "" (the client).
    cancelled_by: str = ""
    # Read with tokens=False: the output in short, and `tokens` is empty (None: read whole).
    summary: OutputSummary | None = None

    # What the request record named apart before readings; the reading is the one truth.
    @property
    def start_state(self) -> str:
        return self.reading.start

    @property
    def stream_tools(self) -> bool:
        return self.reading.stream_tools

    @property
    def tools(self) -> tuple[dict, ...]:
        return self.reading.tools

    @property
    def text(self) -> str:
        """The model's output as it was streamed."""
        if self.summary is not None:
            return self.summary.text
        return "".join(tok.text for tok in self.tokens)

    @property
    def forced_tokens(self) -> int:
        """Tokens the reasoning budget's close appended (read without tokens too)."""
        if self.summary is not None:
            return self.summary.forced
        return sum(1 for tok in self.tokens if tok.forced)

    @property
    def guided_tokens(self) -> int:
        """How many of its tokens the call guard chose rather than the model (issue 22)."""
        if self.summary is not None:
            return self.summary.guided
        return sum(1 for tok in self.tokens if tok.guided is not None)

    @property
    def outcome(self) -> tuple[str, str | None]:
        """(finish reason, error) as recorded; a request the file ends before is an error."""
        if self.finish is None:
            return "error", "the recording ends before this request finished"
        return self.finish, self.error


@dataclass(frozen=True, slots=True)
class Session:
    header: dict
    requests: tuple[RecordedRequest, ...] = ()

    @property
    def model(self) -> str:
        return str(self.header.get("model", ""))

    @property
    def rerun_of(self) -> str:
        """The recording this one re-ran (`prism rerun`), "" for any other."""
        return str(self.header.get("rerun_of", ""))


# ---------------------------------------------------------------------------------- helpers


def default_session_path(now: _dt.datetime | None = None) -> Path:
    """`<user data dir>/prism/sessions/<timestamp>.jsonl` (the folder is not created here)."""
    import platformdirs  # only the recorder's default path needs it

    stamp = (now or _dt.datetime.now()).strftime("%Y%m%d-%H%M%S")
    return Path(platformdirs.user_data_dir("prism")) / "sessions" / f"{stamp}.jsonl"


def request_to_dict(request: ChatRequest | dict) -> dict:
    """A ChatRequest as plain JSON-able data (tuples become lists)."""
    if isinstance(request, dict):
        return request
    return json.loads(json.dumps(dataclasses.asdict(request)))


def request_from_dict(d: dict) -> ChatRequest:
    """Inverse of `request_to_dict`, for re-running a recorded request."""
    d = dict(d)
    messages = tuple(
        Message(**{**m, "tool_calls": tuple(m.get("tool_calls") or ())})
        for m in d.pop("messages", ())
    )
    sampling = Sampling(**d.pop("sampling", {}))
    if "dialect" in d:  # files before the rename named the client `dialect`
        d.setdefault("api", d.pop("dialect"))
    for key in ("tools", "stop"):
        if key in d:
            d[key] = tuple(d[key])
    return ChatRequest(messages=messages, sampling=sampling, **d)


def api_and_family(rec: dict) -> dict[str, str]:
    """A request record's client (`api`) and model family. The family was once called the
    dialect, so older files name it `dialect` next to `api`; files older still, written before
    the client was named `api`, call the client `dialect` and the family `parser_dialect` (the
    earliest have only `dialect`, holding the family)."""
    if "family" in rec:
        return {"api": str(rec.get("api", "")), "family": str(rec["family"])}
    if "api" in rec:
        return {"api": str(rec["api"]), "family": str(rec.get("dialect", ""))}
    old = str(rec.get("dialect", ""))
    parser = str(rec.get("parser_dialect", ""))
    if not parser and old in FAMILIES:
        return {"api": str(rec["request"].get("dialect", "")), "family": old}
    return {"api": old, "family": parser}


def old_reading(rec: dict, family: str) -> Reading:
    """The reading of a request record written before records held one: what the service,
    the playback and the re-parse each rebuilt from its fields then (a recorded request declared
    its tools, even none). A family this version does not know reads as "auto"; players see the
    recorded name in `RecordedRequest.family` and fall back to the pack's."""
    request = dict(rec["request"])  # not an object: damage, as the record's own check says
    return Reading(
        start=str(rec.get("start_state", "content")),
        family=family if family in FAMILIES else "auto",
        tools=tuple(rec.get("tools") or ()),
        tools_declared=True,
        stream_tools=bool(rec.get("stream_tools", STREAM_TOOLS)),
        one_call=one_call_only(request),
        calls_as_text=not request.get("tools"),
    )


def _timings_to_dict(t: Timings) -> dict:
    return {f.name: getattr(t, f.name) for f in dataclasses.fields(Timings)}


# Looked up once: a reader builds a Timings per request (`prism stats` reads thousands).
_TIMING_NAMES = frozenset(f.name for f in dataclasses.fields(Timings))


def timings_from_dict(d: dict) -> Timings:
    return Timings(**{k: v for k, v in d.items() if k in _TIMING_NAMES})


# ---------------------------------------------------------------------------------- writing


def _create(path: Path | None) -> tuple[Path, int]:
    """Create a session file, readable by its owner only (0600); returns it and its descriptor.

    Without a path: a new, unique file in the default folder (0700). Each name is taken by an
    exclusive create, so two instances started in the same second (or racing for one name)
    get two files: a check-then-open would let the second truncate the first's recording. An
    explicit path is the caller's: it is overwritten."""
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, _FILE_MODE)
        if os.name == "posix":
            os.fchmod(fd, _FILE_MODE)  # an existing file keeps its mode otherwise
        return path, fd
    first = default_session_path()
    first.parent.mkdir(mode=_DIR_MODE, parents=True, exist_ok=True)
    if os.name == "posix":
        os.chmod(first.parent, _DIR_MODE)  # a folder an older Prism made more open
    path, n = first, 1
    while True:
        try:
            return path, os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, _FILE_MODE)
        except FileExistsError:
            n += 1
            path = first.with_name(f"{first.stem}-{n}{first.suffix}")


class Recorder:
    """Appends one session to a JSONL file. Safe to call from several threads.

    `t0` arguments are time.perf_counter() values; token times are stored relative to their
    request's t0 (by default, the moment `request()` was called).
    """

    def __init__(self, path: Path | str | None = None, *, model: str = "", pack: str = "",
                 upstream: str = "", rerun_of: str = "", info: dict | None = None,
                 token_counts_estimated: bool = False):
        self.path, fd = _create(Path(path) if path is not None else None)
        self._lock = threading.Lock()
        self._t0 = time.perf_counter()
        self._starts: dict[str, float] = {}
        # Each request record's byte offset in the file, as written (engine/record/index.py:
        # the window reads a request back with one seek).
        self.offsets: dict[str, int] = {}
        self._upstream = upstream
        self._stopping = False  # set by `stopping()`, from a signal handler too: no lock
        self._file = os.fdopen(fd, "w", encoding="utf-8")
        created = _dt.datetime.now(_dt.UTC).astimezone().isoformat(timespec="seconds")
        self._write(
            {"format": FORMAT, "version": VERSION, "created": created, "model": model, "pack": pack,
             # --upstream: the server that generated (its times to first token include the
             # network to it)
             **({"upstream": upstream, "ttft_includes_network": True} if upstream else {}),
             # `prism rerun`: the recording whose requests these re-run
             **({"rerun_of": rerun_of} if rerun_of else {}),
             # What generated (engine/record/model_info.py): the ledger groups by it.
             **({"model_info": dict(info)} if info else {}),
             # A replay without the model's vocabulary: its prompt token counts are estimates
             # (engine/record/replay.py; issue 24, item 2).
             **({"token_counts": "estimate"} if token_counts_estimated else {})}
        )

    def _write(self, record: dict, at: str | None = None) -> None:
        """`at`: a request id whose record this is, to note where it starts (`offsets`)."""
        line = json.dumps(record, ensure_ascii=False) + "\n"
        with self._lock:
            if self._file.closed:
                raise ValueError(f"recorder for {self.path} is closed")
            if at is not None:
                self.offsets[at] = self._file.tell()  # flushed after every line: exact
            # One write per record, then flush: a reader (or a crash) sees whole lines.
            self._file.write(line)
            self._file.flush()

    def request(
        self,
        id: str,
        request: ChatRequest | dict,
        prompt: str,
        *,
        start_state: str = "content",
        api: str = "",
        family: str = "",
        stream_tools: bool = STREAM_TOOLS,
        tools: tuple[dict, ...] | list[dict] = (),
        t0: float | None = None,
        marks: PromptMarks | None = None,
        reading: Reading | None = None,
    ) -> None:
        """A request record. With `reading` (the service's), the request is recorded with
        it, and `start_state`, `family`, `stream_tools` and `tools` are the reading's."""
        if reading is not None:
            start_state, family = reading.start, reading.family
            stream_tools, tools = reading.stream_tools, reading.tools
        t0 = time.perf_counter() if t0 is None else t0
        with self._lock:
            self._starts[id] = t0
        self._write(
            {
                "type": "request",
                "id": id,
                "t": round(t0 - self._t0, 6),
                "request": request_to_dict(request),
                "prompt": prompt,
                "start_state": start_state,
                "api": api,
                "family": family,
                "stream_tools": stream_tools,
                "tools": list(tools),
                **({"reading": reading.to_dict()} if reading is not None else {}),
                # --upstream: this request's time to first token includes the network.
                **({"upstream": self._upstream, "ttft_includes_network": True}
                   if self._upstream else {}),
                # Special tokens the messages brought into the prompt (engine/chat/special.py):
                # their (start, end) in "prompt", the first MAX_MARKS of them.
                **({"content_specials": [list(s) for s in marks.specials],
                    "content_specials_n": marks.n_specials, "special_escaped": marks.escaped}
                   if marks is not None and marks.n_specials else {}),
            },
            at=id,
        )

    def token(self, id: str, i: int, token: Token) -> None:
        with self._lock:
            t0 = self._starts.get(id, self._t0)
        rec: dict[str, Any] = {
            "type": "token",
            "id": id,
            "i": i,
            "tok": token.id,
            "text": token.text,
            "t": round(token.t - t0, 6),
        }
        if token.top:
            rec["top"] = [[text, round(lp, 5)] for text, lp in token.top]
        if token.guided is not None:  # only where the guard acted: most tokens have none
            rec["guided"] = token.guided
        if token.forced:  # only the reasoning budget's close
            rec["forced"] = True
        self._write(rec)

    def stopping(self) -> None:
        """The process is stopping (a signal, the window closing): a cancel recorded from now
        on was the stop's, not its client's (`"cancelled_by": "shutdown"`). Sets a flag and
        takes no lock, so a signal handler may call it while this thread holds the lock."""
        self._stopping = True

    def finish(self, id: str, finish: Finish, result: ParseResult | dict | None = None, *,
               refused: str = "") -> None:
        with self._lock:
            self._starts.pop(id, None)
        rec: dict[str, Any] = {
            "type": "finish",
            "id": id,
            "reason": finish.reason,
            "timings": _timings_to_dict(finish.timings),
            "result": result.to_dict() if isinstance(result, ParseResult) else result,
        }
        if finish.error is not None:
            rec["error"] = finish.error
        if finish.stop_sequence is not None:  # why it stopped: the verdicts read it
            rec["stop_sequence"] = finish.stop_sequence
        if finish.status is not None:
            rec["status"] = finish.status
        if finish.prefix is not None:  # cache forensics (issue 20)
            rec["prefix"] = prefix_to_dict(finish.prefix)
        if refused:  # it never reached the engine: the verdicts read why
            rec["refused"] = refused
        if finish.reason == "cancelled" and self._stopping:
            rec["cancelled_by"] = SHUTDOWN
        self._write(rec)

    def refused(self, id: str, request: ChatRequest | dict, error: str, *,
                stage: str = TEMPLATE, reading: Reading | None = None, api: str = "",
                result: ParseResult | dict | None = None) -> None:
        """A request refused before generation (`stage`: the chat template refused it): its
        request record, with no prompt (none was rendered), then at once its finish, reason
        "error" with the refusal's message, marked `"refused": stage`."""
        self.request(id, request, "", reading=reading, api=api)
        self.finish(id, Finish("error", Timings(), error=error), result, refused=stage)

    def counterpart(self, id: str, of: str) -> None:
        """Name the request `id` re-runs (`of`, its id in the recording re-run): written
        after `id`'s request record, which the service writes on submit."""
        self._write({"type": "counterpart", "id": id, "of": of})

    def model_event(self, event: str, model: str, *, reason: str = "", error: str = "",
                    memory: int = 0) -> None:
        """A model of a catalog loading, loaded, failed or unloaded (and why)."""
        self._write({"type": "model", "event": event, "model": model,
                     "t": round(time.perf_counter() - self._t0, 6),
                     **({"reason": reason} if reason else {}),
                     **({"error": error} if error else {}),
                     **({"memory": memory} if memory else {})})

    def close(self) -> None:
        with self._lock:
            self._file.close()

    def __enter__(self) -> Recorder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
