"""A searchable summary per request row, kept when the row's text is released. Qt-free.

Owns `RowSummary` (what the request list's filter reads of one request: its fields, its
verdict, the tools it called, the newest message's first words, and a lowercased copy of its
prompt's newest part and its output), `summarize` (a `Track` → its summary), `Index`
(summaries by track, made again when the track changes) and `reply_of` (a summary as the
ledger counts a reply: the live session and the re-runs in the window's ledger).

Why a copy of the text: the store drops the documents of all but its newest rows
(inspector/tracks.py); the summary keeps the output's first `OUTPUT_KEEP` characters and the
prompt's last `PROMPT_KEEP`, its newest messages (an agent's prompts repeat their history, so
the head would only hold what every row holds); bench/filter.py measures what that costs. A
row released before it was ever summarized (a recording played at once lets go of its rows
within one frame) reads its text from its recording (`Track.home`, inspector/recall.py).

Threads: the GUI thread (the request list, on each frame's changed rows); bench/filter.py.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.parse.events import TOOL_CALL, TOOL_START
from engine.record import forensics, ledger
from engine.record.ledger import Reply
from engine.record.model_info import UNKNOWN, ModelInfo
from engine.record.verdict import Verdict, verdict_of
from inspector.tracks import Track

PROMPT_KEEP = 4_000
OUTPUT_KEEP = 16_000
FIRST_WORDS = 120  # characters of the newest message kept for the list's column
ENDED = ("done", "cancelled", "error")


@dataclass(frozen=True, slots=True)
class RowSummary:
    """What the filter reads of one request (see the module docstring). `text` is the
    prompt's kept part and the output, lowercased, in one string (one search covers both),
    split at `split` (a NUL between them, so no phrase spans the two); `verdict` is None
    while it runs (or when its events were
    released before it was summarized once ended)."""

    id: str
    source: str
    model: str
    origin: str  # "live", or the recording it was played from
    status: str
    finish: str
    slot: int
    created: float  # wall time, seconds
    anomalies: frozenset[str]
    counts: tuple[tuple[str, int], ...]  # (kind, occurrences) per anomaly kind found
    tools: tuple[str, ...]  # the tools its output called (unknown and unfinished ones too)
    family: str
    text: str
    split: int
    first_words: str  # the newest message, as typed (the list's column)
    verdict: Verdict | None = None
    calls: int = 0
    ttft_ms: float | None = None
    tokens_per_s: float | None = None
    version: int = -1
    generation: int = -1

    @property
    def prompt(self) -> str:
        return self.text[: self.split]

    @property
    def output(self) -> str:
        return self.text[self.split + 1 :]

    @property
    def verdict_kind(self) -> str:
        return self.verdict.kind if self.verdict is not None else ""


def _first_words(request, prompt: str) -> str:
    """The newest message's first words (what the request asks, or the tool result it
    reads), else the prompt's."""
    messages = forensics.messages_of(request)
    text = next((m.content for m in reversed(messages) if m.content), "") or prompt
    return " ".join(text[: FIRST_WORDS * 4].split())[:FIRST_WORDS]


def _from_home(track: Track) -> tuple[str, str, str, tuple[str, ...], Verdict | None, int] \
        | None:
    """The text, tools and verdict of a track released before it was ever summarized (a
    recording played at once: its rows let go within one frame), read from its recording."""
    if track.home is None:
        return None
    from inspector.recall import recorded  # reads the recording only where it must

    rec = recorded(track.home)
    if rec is None:
        return None
    result = rec.result if isinstance(rec.result, dict) else {}
    names = tuple(dict.fromkeys(str((c.get("function") or c).get("name", ""))
                                for c in result.get("tool_calls") or () if isinstance(c, dict)))
    verdict = ledger.reply_of(rec, ModelInfo.from_header({})).verdict if rec.finish else None
    return (rec.prompt[-PROMPT_KEEP:].lower(), rec.text[:OUTPUT_KEEP].lower(),
            _first_words(rec.request, rec.prompt), names,
            verdict, len(names))


def summarize(track: Track, previous: RowSummary | None = None) -> RowSummary:
    """`track` as the filter reads it. A released track has no text left: its words, tools
    and verdict are the ones `previous` (its summary before the release) kept."""
    held = previous if previous is not None and track.released else None
    late = _from_home(track) if track.released and (held is None or (held.verdict is None
                                                   and track.status in ENDED)) else None
    if late is not None:
        prompt, output, words, tools, verdict, calls = late
    elif held is not None:
        prompt, output, words = held.prompt, held.output, held.first_words  # as kept
        tools, verdict, calls = held.tools, held.verdict, held.calls
    elif track.released:  # never seen with its text, and no recording to read it from
        prompt = output = words = ""
        tools, verdict, calls = (), None, 0
    else:
        prompt = track.prompt[-PROMPT_KEEP:].lower()
        output = track.raw[:OUTPUT_KEEP].lower()
        words = _first_words(track.request, track.prompt)
        names: list[str] = []
        calls = 0
        for ev in track.events:
            if ev.kind == TOOL_START and ev.text and ev.text not in names:
                names.append(ev.text)
            elif ev.kind == TOOL_CALL:
                calls += 1
                if ev.call is not None and ev.call.name not in names:
                    names.append(ev.call.name)
        tools = tuple(names)
        verdict = None
        if track.status in ENDED and not track.released:
            verdict = verdict_of(track.events, track.finish_reason or track.status,
                                 error=track.error)
    return RowSummary(
        id=track.id, source=track.source, model=track.model, origin=track.origin,
        status=track.status, finish=track.finish_reason or "", slot=track.slot,
        created=track.created,
        anomalies=frozenset(k for k, n in track.anomalies.items() if n),
        counts=tuple((k, n) for k, n in track.anomalies.items() if n),
        tools=tools, family=track.family or "", text=f"{prompt}\0{output}", split=len(prompt),
        first_words=words, verdict=verdict, calls=calls, ttft_ms=track.ttft_ms,
        tokens_per_s=track.tokens_per_s, version=track.version, generation=track.generation)


class Index:
    """Summaries by track (tracks hash by identity: two sources may share an id)."""

    def __init__(self) -> None:
        self._rows: dict[Track, RowSummary] = {}

    def __len__(self) -> int:
        return len(self._rows)

    def update(self, track: Track) -> RowSummary:
        """The track's summary, made again where the track changed since the last one."""
        old = self._rows.get(track)
        if old is not None and old.version == track.version \
                and old.generation == track.generation:
            return old
        new = self._rows[track] = summarize(track, old)
        return new

    def get(self, track: Track) -> RowSummary:
        return self._rows.get(track) or self.update(track)

    def forget(self, track: Track) -> None:
        self._rows.pop(track, None)


# ------------------------------------------------------------------------------- the ledger

LIVE_ENGINE, RERUN_ENGINE = "live (this window)", "re-run"


def reply_of(s: RowSummary) -> Reply | None:
    """An ended request of the window's own (live, composed or re-run) as the ledger counts a
    recorded one; None while it runs or where its verdict was never read."""
    if s.status not in ENDED or s.verdict is None:
        return None
    finish = s.finish or "unfinished"
    if finish in ("stop", "length") and s.calls:
        finish = "tool_calls"
    engine = RERUN_ENGINE if s.source == "rerun" else LIVE_ENGINE
    keys = {"model": s.model or UNKNOWN, "quant": UNKNOWN, "family": s.family or UNKNOWN,
            "template": UNKNOWN, "engine": engine}
    return Reply(engine, s.id, keys, finish, s.calls, dict(s.counts), s.verdict.kind,
                 s.ttft_ms, s.tokens_per_s, _verdict=s.verdict)
