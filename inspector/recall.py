"""A released track's document read back from its recording. Qt-free.

Owns `reload` (give a released `Track` its document again: prompt, request, tokens, events,
parse result, the recorded result) and `recorded_side` (a track as a compare side, read from its
recording). The request is read with one seek (engine/record/index.py) and its output is fed
through a fresh per-token pipeline with the track's own reading, as playback feeds it
(inspector/playback.py), so a reloaded row shows what a replay of its recording shows, and what
the live run showed. Nothing is reported: a reload is no request (no metrics, no recorder).

Threads: the GUI thread (the store's selection, the compare), like every track write.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import TYPE_CHECKING

from engine.parse.events import ANOMALY, ANOMALY_KINDS, Event, result_of
from engine.pipeline import TokenPipeline
from engine.record.compare import Side, side_of
from engine.record.index import Home, load_home
from engine.record.recording import RecordedRequest
from engine.record.replay import ReplayOutput

if TYPE_CHECKING:  # tracks.py imports this module when a track is selected
    from inspector.tracks import Track

log = logging.getLogger("prism")


def recorded(home: Home) -> RecordedRequest | None:
    """The request a home names, or None (gone, damaged, not there: said in the log)."""
    try:
        if not home.id:  # a plain text output: the whole file is its one output
            text = home.path.read_text(encoding="utf-8")
            return RecordedRequest(id="", request={}, prompt="",
                                   tokens=ReplayOutput.from_text(text, str(home.path)).tokens,
                                   finish="stop")
        return load_home(home)
    except (OSError, ValueError) as e:
        log.warning("[prism] cannot read %s back from %s: %s", home.id or "the output",
                    home.path.name, e)
        return None


def reload(track: Track) -> bool:
    """Give a released track its document back from its recording; False when it has no
    home, or the recording no longer holds it (the row stays as it was)."""
    if not track.released or track.home is None:
        return False
    rec = recorded(track.home)
    if rec is None:
        return False
    fill(track, rec)
    return True


def fill(track: Track, rec: RecordedRequest) -> None:
    """The recorded request's document on `track`, read as the track reads it. Its summary
    (status, finish, timings, slot) is the track's own and stays as it is."""
    reading = track.reading
    pipe = TokenPipeline(track.id, reading.parser(), filters=reading.filters(),
                         tools=reading.tools)
    events: list[Event] = []
    for tok in rec.tokens:
        events += pipe.feed(tok)
    events += pipe.finish()
    reason = rec.outcome[0]  # read as playback reads it (Track.finish)
    events = recorded_ids(events, call_ids(rec.result))
    base = track.submitted  # token times as the track keeps them (playback's clock, or live)
    track.tokens = [dataclasses.replace(t, t=base + t.t) for t in rec.tokens]
    track._raw, track._raw_n = "", 0
    track.events = events
    track._events_end = events[-1].span[1] if events else 0
    anomalies = dict.fromkeys(ANOMALY_KINDS, 0)
    for ev in events:
        if ev.kind == ANOMALY and ev.anomaly:
            anomalies[ev.anomaly] = anomalies.get(ev.anomaly, 0) + 1
    track.anomalies = anomalies
    track._count_prompt()
    track.state = pipe.state
    track.prompt = rec.prompt
    track.request = rec.request or None
    track.recorded_result = rec.result
    track.result = result_of(events, reason)
    track.released = False
    track.generation += 1
    track.version += 1


def call_ids(recorded: dict | None) -> dict[int, str]:
    """The call ids a recorded result gave, by call index: a parser draws its ids' prefix at
    random, so a second reading of the output names the same calls otherwise. Playback and a
    reload give the calls these, so the window shows the ids the live run showed (and its
    client got). A result lists its calls in the order they were numbered."""
    calls = (recorded or {}).get("tool_calls") or ()
    return {k: c["id"] for k, c in enumerate(calls)
            if isinstance(c, dict) and isinstance(c.get("id"), str)}


def recorded_ids(events: list[Event], ids: dict[int, str]) -> list[Event]:
    """The events with their calls named as `ids` says (`call_ids`)."""
    if not ids:
        return events
    out = []
    for ev in events:
        if ev.call_id is not None and ev.index in ids:
            ev = dataclasses.replace(ev, call_id=ids[ev.index])
        if ev.call is not None and ev.call.index in ids:
            ev = dataclasses.replace(ev, call=dataclasses.replace(ev.call, id=ids[ev.call.index]))
        out.append(ev)
    return out


def recorded_side(track: Track, label: str = "") -> Side | None:
    """A finished track as a compare side, read from its recording as File → Compare reads a
    recording (None: no home, not finished there yet, or gone)."""
    if track.home is None or not track.home.id:
        return None
    rec = recorded(track.home)
    if rec is None or rec.finish is None:
        return None
    side = side_of(rec, label or track.id)
    return side if side.id == track.id else dataclasses.replace(side, id=track.id)
