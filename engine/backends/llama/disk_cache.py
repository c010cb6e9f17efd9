"""DiskCache: KV prefixes kept on disk, so a prompt's prefill outlives the process that paid it.

Owns the cache folder, its file format, its in-memory index, the writer thread and eviction.
engine/backends/llama/batch.py uses it on the engine's worker thread ("prism-llama"): `best`,
`read` and `snapshot`-side calls run there (only that thread touches the llama context); the
files are written, deduplicated and evicted on the cache's own thread ("prism-kv-save"), so no
sequence in the batch waits on the disk while a save is written (docs/engine/disk-cache.md;
docs/design.md, section 5).

Why: Open WebUI's 36 built-in tools are ~7,000 tokens in front of every chat, Claude Code's
first request ~20,000, Codex's ~4,500; each start of the server, and each new session of an
agent, paid that prefill again (301 s to the first token on the 2-core dev box). llama.cpp's
`--slot-save-path` is manual, and its restore after a restart does nothing (its #26676).

What is saved: when a job ends, the whole sequence its slot holds (prompt and reply), with
llama.cpp's per-sequence state API (`llama_state_seq_get_data`). A later prompt that shares any
prefix with it loads the state into its slot and cuts it back to that prefix
(`llama_memory_seq_rm`), so one entry serves every message boundary inside it: the next turn of
the same conversation, or a new conversation behind the same system prompt and tools. The cut
state is exact (the logits after it are bit-identical to a prefill on this engine; tests check
the greedy answer). Near-duplicates are not saved: a sequence that adds fewer than SAVE_MIN_NEW
tokens (or under a tenth of itself) to what an entry already holds is skipped, and an entry that
a new one extends is deleted, so fifty chats behind one tools prompt keep one copy of it.

Format of one file, `<blake2b of the tokens>.kv` (engine/backends/llama/disk_files.py, which
reads the folder as untrusted input): the magic `PRISMKV2`, a little-endian u32 header length, a
JSON header (namespace, token count, state length, a CRC-32 of tokens and state), the tokens as
int32, then the state bytes. CRC-32, not a cryptographic digest: it is there to catch a torn or
damaged file, not a forger (whoever can write the cache folder can write anything), and it is
4x cheaper than blake2b (55 against 200 ms for the 178 MB of an 8k-token state of the default
model), time a load spends on the engine thread. Files live in a folder per namespace
(`ns-<hash>`: the model file's fingerprint, llama-cpp-python's version, the KV layout and
types, the file format), so another model's or another layout's state is never even listed; a
file whose header names another namespace ("foreign"), whose size is not what its header says
("truncated") or whose digest fails ("corrupt") is skipped with a log line, and the last two
are deleted; anything else that is not a readable Prism file (a FIFO, a directory, a symlink, a
header of the wrong shape) is skipped, logged once by name and left alone: the cache deletes
only its own files. Writes go to a unique, locked temporary name and are renamed into place
(atomic on POSIX and Windows), so two Prism processes sharing the folder never see half a file;
each rescans the folder (cheap: it reads only new files' headers) before looking up, and
removes the temporary files of writers that died. Eviction is least recently used (a load
touches the file's mtime) until everything in the folder, foreign files included, fits
`max_bytes`. A save the disk has no room for (ENOSPC) evicts the oldest entries until it fits
and is tried once more; any other failed write costs that save alone, never a half file.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import queue
import shutil
import struct
import threading
import time
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from engine.backends.llama import disk_files as df
from engine.backends.llama.disk_files import MAGIC, SUFFIX, TMP_MARK, BadFile

log = logging.getLogger("prism")

DEFAULT_SIZE = 4 * 2**30  # bytes; the default model's KV is ~23 KB a token: ~180k tokens
SAVE_MIN = 256  # tokens: shorter sequences re-prefill in well under a second
SAVE_MIN_NEW = 256  # tokens a save must add to the best entry it shares a prefix with ...
SAVE_MIN_SHARE = 0.10  # ... and this share of its own length
LOAD_MIN = 32  # tokens a load must gain over what the slot already holds
LOAD_MAX_WASTE = 8  # never load an entry more than 8x longer than the prefix it gives
CLOSE_WAIT_S = 5.0  # close() writes the pending saves for this long, then drops the rest
FINGERPRINT_BYTES = 4 * 2**20


@dataclass(frozen=True, eq=False)
class Entry:
    """One saved sequence. `tokens` is a list for C-speed prefix comparison (never mutated)."""

    path: Path
    tokens: list[int]
    size: int  # bytes on disk


def fingerprint(model: Path) -> str:
    """A model file's identity without reading gigabytes: its size, first and last 4 MiB.
    Two copies of one file agree; a re-quantized or edited file does not (its tensors move)."""
    h = hashlib.blake2b(digest_size=16)
    size = model.stat().st_size
    h.update(str(size).encode())
    with model.open("rb") as f:
        h.update(f.read(FINGERPRINT_BYTES))
        f.seek(max(size - FINGERPRINT_BYTES, 0))
        h.update(f.read(FINGERPRINT_BYTES))
    return h.hexdigest()


def common_prefix(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    lo, hi = 0, n  # binary search on slice equality: C-speed comparisons, log n of them
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _mtime(e: Entry) -> float:
    try:
        return e.path.stat().st_mtime
    except OSError:
        return 0.0


def _tokens_bytes(tokens: Sequence[int]) -> bytes:
    return struct.pack(f"<{len(tokens)}i", *tokens)


class DiskCache:
    """See the module docstring. One per engine; `close()` writes the pending saves, for
    CLOSE_WAIT_S at most."""

    def __init__(self, root: Path, namespace: dict[str, object],
                 max_bytes: int = DEFAULT_SIZE) -> None:
        ns = json.dumps({**namespace, "format": MAGIC.decode()}, sort_keys=True)
        self.namespace = hashlib.blake2b(ns.encode(), digest_size=8).hexdigest()
        self.dir = Path(root) / f"ns-{self.namespace}"
        self.dir.mkdir(parents=True, exist_ok=True)
        (self.dir / "namespace.json").write_text(ns + "\n", encoding="utf-8")
        self.max_bytes = max_bytes
        self._lock = threading.Lock()  # the index: engine thread reads, writer thread edits
        self._index: dict[str, Entry] = {}
        self._seen: dict[str, tuple[int, int]] = {}  # name -> (size, mtime_ns) already read
        self._jobs: queue.Queue[tuple[list[int], bytes] | None] = queue.Queue()
        self._abandon = threading.Event()  # close() gave up waiting: drop what is left
        self._writing: Path | None = None  # the writer's temporary file now
        self.saves = self.loads = self.skipped = 0
        self.refresh()
        self._writer = threading.Thread(target=self._write_loop, name="prism-kv-save",
                                        daemon=True)
        self._writer.start()

    # -- the index --------------------------------------------------------------------------

    @property
    def bytes_used(self) -> int:
        """Everything in the folder, whoever wrote it: what --cache-size bounds."""
        return df.folder_bytes(self.dir)

    def __len__(self) -> int:
        with self._lock:
            return len(self._index)

    def refresh(self) -> None:
        """Read the headers of files this process has not seen (another process's saves),
        forget files that are gone (another process's evictions), remove temporary files whose
        writer died. A file that cannot be used is skipped and logged, never raised."""
        try:
            listing = {p.name: p for p in self.dir.iterdir()}
        except OSError as e:
            log.warning("[prism] disk cache: cannot list %s: %s", self.dir, e.strerror or e)
            return
        now = time.time()
        for name, p in listing.items():
            try:
                self._look_at(name, p, now)
            except Exception as e:  # the checks above are meant to be complete; if not ...
                self._skip(p, f"unreadable ({type(e).__name__})", delete=False)
        with self._lock:
            for name in [n for n in self._index if n not in listing]:
                del self._index[name]

    def _look_at(self, name: str, p: Path, now: float) -> None:
        if TMP_MARK in name:
            if df.stale_tmp(p, now):  # never loaded; removed once its writer is gone
                log.info("[prism] disk cache: removed %s, left by a writer that stopped", name)
                with contextlib.suppress(OSError):
                    p.unlink()
            return
        if not name.endswith(SUFFIX):
            return
        try:
            st = p.lstat()
        except OSError:
            return
        if self._seen.get(name) == (st.st_size, st.st_mtime_ns) or name in self._index:
            return
        self._seen[name] = (st.st_size, st.st_mtime_ns)  # a bad file is logged once
        entry = self._read_header(p, st.st_size)
        if entry is not None:
            with self._lock:
                self._index[name] = entry

    def _read_header(self, p: Path, size: int) -> Entry | None:
        try:
            fd = df.open_regular(p)
        except BadFile as e:
            return self._skip(p, str(e), delete=False)
        try:
            header = df.parse_header(df.read_exactly(fd, df.HEAD),
                                     lambda n: df.read_exactly(fd, n))
            if header.namespace != self.namespace:
                return self._skip(p, "foreign (another model, version or KV layout)",
                                  delete=False)
            if size != header.file_bytes:  # our namespace: a copy cut short, ours to delete
                return self._skip(p, f"truncated ({size} bytes, its header says "
                                     f"{header.file_bytes})")
            n = header.n_tokens
            tokens = list(struct.unpack(f"<{n}i", df.read_exactly(fd, 4 * n)))
        except BadFile as e:
            return self._skip(p, str(e), delete=False)
        except (OSError, struct.error) as e:
            return self._skip(p, f"unreadable ({type(e).__name__})", delete=False)
        finally:
            os.close(fd)
        return Entry(p, tokens, size)

    def _skip(self, p: Path, why: str, delete: bool = True) -> None:
        self.skipped += 1
        log.warning("[prism] disk cache: skipped %s: %s", p.name, why)
        if delete and df.OWN_NAME.fullmatch(p.name) and df.is_regular(p) is not None:
            self._unlink(p)
        else:
            with self._lock:
                self._index.pop(p.name, None)
        return None

    def _unlink(self, p: Path) -> None:
        with contextlib.suppress(OSError):  # already gone: another process evicted it
            p.unlink()
        with self._lock:
            self._index.pop(p.name, None)

    # -- engine thread ------------------------------------------------------------------------

    def best(self, prompt: list[int]) -> tuple[Entry | None, int]:
        """The entry sharing the longest prefix with `prompt`, and that prefix's length."""
        self.refresh()
        with self._lock:
            entries = list(self._index.values())
        best, best_n = None, 0
        for e in entries:
            n = common_prefix(e.tokens, prompt)
            shorter = best is not None and len(e.tokens) < len(best.tokens)
            if n > best_n or (n == best_n and shorter):  # the cheaper load of two equals
                best, best_n = e, n
        return best, best_n

    def worth_loading(self, entry: Entry, n: int, keep: int) -> bool:
        """Load `entry` for a prefix of `n` tokens when the slot would reuse only `keep`?"""
        return n - keep >= LOAD_MIN and len(entry.tokens) <= LOAD_MAX_WASTE * n

    def read(self, entry: Entry) -> bytearray | None:
        """The state bytes of `entry`, checked against its header, its tokens and its digest;
        None (logged, and the file deleted when it is ours and damaged) if it cannot be used."""
        try:
            fd = df.open_regular(entry.path)
        except BadFile as e:  # gone (evicted by another process), or swapped for a non-file
            log.info("[prism] disk cache: %s cannot be read (%s)", entry.path.name, e)
            with self._lock:
                self._index.pop(entry.path.name, None)
            return None
        try:
            data = df.read_all(fd)
        except OSError as e:
            log.info("[prism] disk cache: %s cannot be read (%s)", entry.path.name,
                     e.strerror or type(e).__name__)
            with self._lock:
                self._index.pop(entry.path.name, None)
            return None
        finally:
            os.close(fd)
        tok = _tokens_bytes(entry.tokens)
        try:
            header = df.parse_header(bytes(data[:df.HEAD]),
                                     lambda n: bytes(data[df.HEAD:df.HEAD + n]))
            body = memoryview(data)[df.HEAD + header.length:]
            ok = (header.namespace == self.namespace and header.n_tokens == len(entry.tokens)
                  and len(body) == 4 * header.n_tokens + header.state_bytes
                  and body[:len(tok)] == tok  # the file at this name is the one indexed
                  and f"{zlib.crc32(body):08x}" == header.digest)
        except BadFile:
            ok = False
        if not ok:
            return self._skip(entry.path, "corrupt (its digest does not match)")
        self.loads += 1
        with contextlib.suppress(OSError):  # least recently used is by mtime: used now
            os.utime(entry.path)
        return bytearray(body[len(tok):])

    def worth_saving(self, tokens: list[int]) -> bool:
        """Save a sequence of these tokens? Not when short, and not when an entry already holds
        all but a little of it (module docstring)."""
        if len(tokens) < SAVE_MIN:
            return False
        _, n = self.best(tokens)
        new = len(tokens) - n
        return new >= SAVE_MIN_NEW and new >= SAVE_MIN_SHARE * len(tokens)

    def save(self, tokens: list[int], state: bytes | memoryview) -> None:
        """Queue a sequence's state for writing (returns at once)."""
        if not self._abandon.is_set():
            self._jobs.put((list(tokens), state))

    # -- writer thread ------------------------------------------------------------------------

    def _write_loop(self) -> None:
        with contextlib.suppress(AttributeError, OSError):  # Linux: a thread's own niceness
            # The writer gives way to the decode on a busy machine (its hashing and writing
            # took CPU from the sequences beside a save: bench/prefix_cache.py).
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 10)
        while True:
            job = self._jobs.get()
            try:
                if job is None:
                    return
                if not self._abandon.is_set():
                    self._write(*job)
            except Exception:  # a bug must not kill the thread: the next save may work
                log.exception("[prism] disk cache: a save failed")
            finally:
                self._jobs.task_done()

    def _write(self, tokens: list[int], state: bytes | memoryview) -> None:
        tok = _tokens_bytes(tokens)
        name = hashlib.blake2b(tok, digest_size=16).hexdigest() + SUFFIX
        digest = f"{zlib.crc32(state, zlib.crc32(tok)):08x}"  # tokens then state, not joined
        head = df.header_bytes(self.namespace, len(tokens), len(state), digest)
        need = len(head) + len(tok) + len(state)
        if need > self.max_bytes:
            log.info("[prism] disk cache: not saved: %d tokens (%.0f MiB) are more than "
                     "--cache-size", len(tokens), need / 2**20)
            return
        path = self.dir / name
        for attempt in (1, 2):
            tmp = self.dir / f"{name}{TMP_MARK}{os.getpid()}-{threading.get_ident()}"
            self._writing = tmp
            try:
                df.write_file(tmp, path, [head, tok, state], self._abandon.is_set)
                break
            except df.Abandoned:
                return
            except OSError as e:
                if self._abandon.is_set():
                    return
                why = e.strerror or type(e).__name__
                if attempt == 1 and e.errno in df.DISK_FULL and self._make_room(need):
                    log.warning("[prism] disk cache: disk full saving %s; older entries "
                                "evicted, trying again", name)
                    continue
                log.warning("[prism] disk cache: could not save %s (%d tokens): %s", name,
                            len(tokens), why)
                return
            finally:
                self._writing = None
        try:
            st = path.stat()
        except OSError:  # evicted by another process already
            return
        with self._lock:
            self._index[name] = Entry(path, list(tokens), st.st_size)
            self._seen[name] = (st.st_size, st.st_mtime_ns)
            # An entry this one extends is of no more use: every prefix of it is in this one.
            extended = [e for n, e in self._index.items()
                        if n != name and len(e.tokens) < len(tokens)
                        and tokens[:len(e.tokens)] == e.tokens]
        for e in extended:
            self._unlink(e.path)
        self.saves += 1
        self._evict()

    def _oldest_first(self) -> list[Entry]:
        with self._lock:
            entries = list(self._index.values())
        entries.sort(key=_mtime)  # a load touches the file, in this process or another
        return entries

    def _evict(self) -> None:
        total = df.folder_bytes(self.dir)  # foreign files, others' temporary files count too
        for e in self._oldest_first():
            if total <= self.max_bytes:
                break
            log.info("[prism] disk cache: evicted %s (%d tokens, %.0f MiB): over %.1f GiB",
                     e.path.name, len(e.tokens), e.size / 2**20, self.max_bytes / 2**30)
            self._unlink(e.path)
            total -= e.size

    def _make_room(self, need: int) -> bool:
        """Evict the least recently used entries until the disk has `need` bytes free (the
        disk filled before --cache-size did). True: there is room now."""
        def free() -> int:
            try:
                return shutil.disk_usage(self.dir).free
            except OSError:
                return 0

        for e in self._oldest_first():
            if free() >= need:
                break
            log.info("[prism] disk cache: evicted %s (%d tokens, %.0f MiB): the disk is full",
                     e.path.name, len(e.tokens), e.size / 2**20)
            self._unlink(e.path)
        return free() >= need

    def flush(self, timeout: float = 30.0) -> None:
        """Wait until the queued saves are written (tests)."""
        deadline = time.monotonic() + timeout
        while self._jobs.unfinished_tasks and time.monotonic() < deadline:
            time.sleep(0.01)

    def close(self, timeout: float = CLOSE_WAIT_S) -> None:
        """Write the queued saves, for `timeout` seconds at most; what is left then is dropped
        (a save being written loses its temporary file, never leaves half a .kv) and close
        returns, even with the writer stuck in a system call on a hung disk."""
        self._jobs.put(None)
        self._writer.join(timeout)
        if not self._writer.is_alive():
            return
        self._abandon.set()  # the writer stops at its next chunk and drops the queue
        dropped = 0
        while True:
            try:
                job = self._jobs.get_nowait()
            except queue.Empty:
                break
            self._jobs.task_done()
            dropped += job is not None
        tmp = self._writing
        if tmp is not None:
            with contextlib.suppress(OSError):
                tmp.unlink()
        self._jobs.put(None)  # the writer, once its system call returns, ends
        log.warning("[prism] disk cache: closed after %.0f s with a save unfinished; "
                    "%d more dropped", timeout, dropped)

    def describe(self) -> str:
        return (f"{self.dir}: {len(self)} entries, {self.bytes_used / 2**20:.0f} MiB of "
                f"{self.max_bytes / 2**30:.1f} GiB")
