"""Where each request of a recording starts in its file, and reading one request back from it.

Owns `Home` (a request's place: its recording and its id there), `RecordingIndex` (each request
id's byte offset in one recording: the recorder's own offsets while it writes the file, else
found by scanning the file's new bytes), `index_of` (one index per file, shared by everyone who
asks) and `load_home` (one request read back: one seek, then that request's lines). This is how
the window gets a released request's text back (inspector/recall.py) and how the compare reads
a side it no longer holds; the file stays the one truth, so memory stays bounded whatever the
session's length. See docs/design.md, section 6 "Recordings".

A scan finds request records by the recorder's layout (`{"type": "request", "id": ...` at the
start of a line), at C speed over the raw bytes; a file written another way (its request lines
laid out otherwise) is found by decoding just the lines that name a request record. Only whole
lines are indexed, so a file still being written is scanned on from its last whole line.

Threads: any thread; an index takes its own lock while it scans. A recorder's offsets are only
ever added to (on the thread that records), so reading them needs no lock.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from engine.record.reader import _STR, _Builder
from engine.record.recording import RecordedRequest, RecordingError

CHUNK = 8 << 20  # bytes read per step of a scan: a 100 MB file is scanned in 13 reads
# A request record as `Recorder.request` lays it out begins so, at the start of a line (found
# with a plain byte search: a regex anchored at line starts tries every byte); its id follows.
_REQUEST = b'{"type": "request", "id": "'
_ID = re.compile(rb'(' + _STR.encode() + rb')"')
_NL_REQUEST = b"\n" + _REQUEST
# How any line naming a request record says so, whatever its layout (checked by decoding it).
_TYPE_REQUEST = (b'"type": "request"', b'"type":"request"')


@dataclass(frozen=True, slots=True)
class Home:
    """Where a request lives: the recording `path` and its `id` there. `id` "" is a plain
    text output, the whole file being the one request's output."""

    path: Path
    id: str


class RecordingIndex:
    """Request id → byte offset of its request record in one recording (see the module
    docstring). `live`: the recorder's own offsets (`Recorder.offsets`) while it writes."""

    def __init__(self, path: Path, live: Mapping[str, int] | None = None) -> None:
        self.path = path
        self.live = live
        self._offsets: dict[str, int] = {}
        # Bytes of whole lines indexed by the recorder's layout, and by decoding any line
        # that names a request record (done only once an id is not found the fast way).
        self._scanned = self._decoded = 0
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._offsets) + (len(self.live) if self.live is not None else 0)

    def offset(self, id: str) -> int | None:
        """Where `id`'s request record starts (None: the file has none)."""
        if self.live is not None and (at := self.live.get(id)) is not None:
            return at
        at = self._offsets.get(id)
        if at is None:
            self.scan()  # written since the last scan, or never scanned
            at = self._offsets.get(id)
        if at is None:
            self.scan(decode=True)  # laid out otherwise, by another writer?
            at = self._offsets.get(id)
        return at

    def reset(self) -> None:
        """Forget every offset found by scanning (the file was written anew)."""
        with self._lock:
            self._offsets.clear()
            self._scanned = self._decoded = 0

    def scan(self, decode: bool = False) -> int:
        """Index the request records written since the last scan; returns how many the index
        knows. `decode`: find request lines of any layout, decoding each line that names a
        request record (slower; `offset` asks for it only for an id not found otherwise)."""
        if self.path.stat().st_size < max(self._scanned, self._decoded):
            self.reset()  # shorter than what was indexed: written anew
        with self._lock, self.path.open("rb") as f:
            pos = self._decoded if decode else self._scanned
            f.seek(pos)
            buf = b""
            while data := f.read(CHUNK):
                buf = buf + data if buf else data
                end = buf.rfind(b"\n") + 1
                if not end:
                    continue  # one line longer than a chunk: read on
                (self._index_any if decode else self._index)(buf, end, pos)
                pos += end
                buf = buf[end:]
            # A last line still being written is read next time.
            if decode:
                self._decoded = pos
            else:
                self._scanned = pos
        return len(self._offsets)

    def _index(self, block: bytes, end: int, base: int) -> None:
        """The request lines in the recorder's layout among block[:end]'s whole lines."""
        found = self._offsets
        at = 0 if block.startswith(_REQUEST) else block.find(_NL_REQUEST, 0, end) + 1
        while at >= 0 and (at or block.startswith(_REQUEST)):
            m = _ID.match(block, at + len(_REQUEST), end)
            if m is not None:
                raw = m.group(1)
                rid = json.loads(b'"' + raw + b'"') if b"\\" in raw else raw.decode("utf-8")
                found.setdefault(rid, base + at)
            i = block.find(_NL_REQUEST, at + 1, end)
            at = i + 1 if i >= 0 else -1

    def _index_any(self, block: bytes, end: int, base: int) -> None:
        """The request lines of any layout among block[:end]'s whole lines."""
        found = self._offsets
        seen = set()
        for key in _TYPE_REQUEST:
            i = block.find(key, 0, end)
            while i >= 0:
                at = block.rfind(b"\n", 0, i) + 1
                stop = block.find(b"\n", i, end)
                i = block.find(key, i + 1, end)
                if at in seen:
                    continue
                seen.add(at)
                try:
                    rec = json.loads(block[at:stop])
                except ValueError:
                    continue  # damage: the reader names it when the request is read
                if isinstance(rec, dict) and rec.get("type") == "request" and "id" in rec:
                    found.setdefault(str(rec["id"]), base + at)

    def load(self, id: str) -> RecordedRequest | None:
        """Request `id` as recorded, read from its offset (None: the file has no such
        request). Lines of other requests in between (parallel serving) are passed over
        without being decoded. A damaged line raises `RecordingError` (its line number
        counted from the request record's)."""
        at = self.offset(id)
        if at is None:
            return None
        rec = self._read(id, at)
        if rec is None:  # the file was written anew since it was indexed
            self.reset()
            at = self.offset(id)
            rec = self._read(id, at) if at is not None else None
        return rec

    def _read(self, id: str, at: int) -> RecordedRequest | None:
        # Lines that do not hold the id, quoted as JSON writes it, are another request's.
        needle = json.dumps(id, ensure_ascii=False).encode()
        b = _Builder()
        with self.path.open("rb") as f:
            f.seek(at)
            for n, raw in enumerate(f):
                if needle not in raw:
                    if n == 0:
                        return None  # not the request record the index says
                    continue
                line = raw.decode("utf-8", errors="replace").rstrip("\n")
                if n and b.token_line(line):
                    continue
                try:
                    rec = json.loads(line)
                    if not isinstance(rec, dict) or rec.get("id") != id:
                        if n == 0:
                            return None
                        continue  # another request's record that names this id inside it
                    if n == 0 and rec.get("type") != "request":
                        return None
                    b.add(rec)
                except (KeyError, TypeError, ValueError) as e:
                    raise RecordingError(f"request {id!r}: {e}", n + 1, b.session()) from None
                if rec.get("type") == "finish":
                    break
        session = b.session()
        return session.requests[0] if session.requests else None


_INDEXES: dict[Path, RecordingIndex] = {}
_LOCK = threading.Lock()


def index_of(path: Path | str, live: Mapping[str, int] | None = None) -> RecordingIndex:
    """The one index of a recording (by its resolved path); `live`: the recorder's offsets,
    given by whoever holds the recorder writing it."""
    key = Path(path).resolve()
    with _LOCK:
        ix = _INDEXES.get(key)
        if ix is None:
            ix = _INDEXES[key] = RecordingIndex(key, live)
        elif live is not None:
            ix.live = live
        return ix


def load_home(home: Home) -> RecordedRequest | None:
    """The request a `Home` names, read back from its recording (see `RecordingIndex.load`)."""
    return index_of(home.path).load(home.id)
