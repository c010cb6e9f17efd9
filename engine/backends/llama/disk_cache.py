"""DiskCache: KV prefixes kept on disk, so a prompt's prefill outlives the process that paid it.

Owns the cache folder, its file format, its in-memory index, the writer thread and eviction.
engine/backends/llama/batch.py uses it on the engine's worker thread ("prism-llama"): `best`,
`read` and `snapshot`-side calls run there (only that thread touches the llama context); the
files are written, deduplicated and evicted on the cache's own thread ("prism-kv-save"), so no
sequence in the batch waits on the disk while a save is written (README, "The disk prompt
cache"; docs/design.md, section 5).

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

Format of one file, `<blake2b of the tokens>.kv`: the magic `PRISMKV2`, a little-endian u32
header length, a JSON header (namespace, token count, state length, a CRC-32 of tokens and
state), the tokens as int32, then the state bytes. CRC-32, not a cryptographic digest: it is
there to catch a torn or damaged file, not a forger (whoever can write the cache folder can
write anything), and it is 4x cheaper than blake2b (55 against 200 ms for the 178 MB of an
8k-token state of the default model), time a load spends on the engine thread. Files live in a
folder per namespace (`ns-<hash>`: the model file's fingerprint, llama-cpp-python's version,
the KV layout and types, the file format), so another model's or another layout's state is
never even listed; a file whose header names another namespace ("foreign"), whose size is not
what its header says ("truncated") or whose digest fails ("corrupt") is skipped with a log
line, and the last two are deleted. Writes go to a unique temporary name and are renamed into
place (atomic on POSIX and Windows), so two Prism processes sharing the folder never see half a
file; each rescans the folder (cheap: it reads only new files' headers) before looking up.
Eviction is least recently used (a load touches the file's mtime) down to `max_bytes`.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import queue
import struct
import threading
import time
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger("prism")

MAGIC = b"PRISMKV2"  # 1: blake2b digests (those files sit in another namespace)
SUFFIX = ".kv"
DEFAULT_SIZE = 4 * 2**30  # bytes; the default model's KV is ~23 KB a token: ~180k tokens
SAVE_MIN = 256  # tokens: shorter sequences re-prefill in well under a second
SAVE_MIN_NEW = 256  # tokens a save must add to the best entry it shares a prefix with ...
SAVE_MIN_SHARE = 0.10  # ... and this share of its own length
LOAD_MIN = 32  # tokens a load must gain over what the slot already holds
LOAD_MAX_WASTE = 8  # never load an entry more than 8x longer than the prefix it gives
STALE_TMP_S = 3600.0  # a temporary file this old was left by a crashed writer
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
    """See the module docstring. One per engine; `close()` flushes the pending writes."""

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
        self.saves = self.loads = self.skipped = 0
        self.refresh()
        self._writer = threading.Thread(target=self._write_loop, name="prism-kv-save",
                                        daemon=True)
        self._writer.start()

    # -- the index --------------------------------------------------------------------------

    @property
    def bytes_used(self) -> int:
        with self._lock:
            return sum(e.size for e in self._index.values())

    def __len__(self) -> int:
        with self._lock:
            return len(self._index)

    def refresh(self) -> None:
        """Read the headers of files this process has not seen (another process's saves),
        forget files that are gone (another process's evictions)."""
        try:
            listing = {p.name: p for p in self.dir.iterdir()}
        except OSError as e:
            log.warning("[prism] disk cache: cannot list %s: %s", self.dir, e)
            return
        now = time.time()
        for name, p in listing.items():
            if ".tmp-" in name:
                self._drop_stale_tmp(p, now)
                continue
            if not name.endswith(SUFFIX):
                continue
            try:
                st = p.stat()
            except OSError:
                continue
            if self._seen.get(name) == (st.st_size, st.st_mtime_ns) or name in self._index:
                continue
            self._seen[name] = (st.st_size, st.st_mtime_ns)
            entry = self._read_header(p, st.st_size)
            if entry is not None:
                with self._lock:
                    self._index[name] = entry
        with self._lock:
            for name in [n for n in self._index if n not in listing]:
                del self._index[name]

    def _read_header(self, p: Path, size: int) -> Entry | None:
        try:
            with p.open("rb") as f:
                head = f.read(12)
                if len(head) < 12 or head[:8] != MAGIC:
                    return self._skip(p, "not a Prism KV file", delete=False)
                (hlen,) = struct.unpack("<I", head[8:])
                header = json.loads(f.read(hlen))
                if header.get("namespace") != self.namespace:
                    return self._skip(p, "foreign (another model, version or KV layout)",
                                      delete=False)
                n, m = int(header["n_tokens"]), int(header["state_bytes"])
                if size != 12 + hlen + 4 * n + m:
                    return self._skip(p, f"truncated ({size} bytes, its header says "
                                         f"{12 + hlen + 4 * n + m})")
                tokens = list(struct.unpack(f"<{n}i", f.read(4 * n)))
        except (OSError, ValueError, KeyError, struct.error) as e:
            return self._skip(p, f"unreadable header ({type(e).__name__}: {e})")
        return Entry(p, tokens, size)

    def _skip(self, p: Path, why: str, delete: bool = True) -> None:
        self.skipped += 1
        log.warning("[prism] disk cache: skipped %s: %s", p.name, why)
        if delete:
            self._unlink(p)
        return None

    def _unlink(self, p: Path) -> None:
        with contextlib.suppress(OSError):  # already gone: another process evicted it
            p.unlink()
        with self._lock:
            self._index.pop(p.name, None)

    @staticmethod
    def _drop_stale_tmp(p: Path, now: float) -> None:
        try:
            if now - p.stat().st_mtime > STALE_TMP_S:
                p.unlink()
        except OSError:
            pass

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
        """The state bytes of `entry`, checked against its digest; None (logged, and the
        file deleted when damaged) if it cannot be used."""
        try:
            data = entry.path.read_bytes()
        except OSError as e:  # evicted by another process since the lookup
            log.info("[prism] disk cache: %s is gone (%s)", entry.path.name, e)
            self._unlink(entry.path)
            return None
        try:
            (hlen,) = struct.unpack("<I", data[8:12])
            header = json.loads(data[12:12 + hlen])
            body = memoryview(data)[12 + hlen:]
            n = int(header["n_tokens"])
            ok = (len(body) == 4 * n + int(header["state_bytes"])
                  and f"{zlib.crc32(body):08x}" == header["digest"])
        except (ValueError, KeyError, struct.error):
            ok = False
        if not ok:
            return self._skip(entry.path, "corrupt (its digest does not match)")
        self.loads += 1
        with contextlib.suppress(OSError):  # least recently used is by mtime: used now
            os.utime(entry.path)
        return bytearray(body[4 * n:])

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
                self._write(*job)
            except Exception:  # a full disk must not kill the thread: the next save may fit
                log.exception("[prism] disk cache: a save failed")
            finally:
                self._jobs.task_done()

    def _write(self, tokens: list[int], state: bytes | memoryview) -> None:
        tok = _tokens_bytes(tokens)
        name = hashlib.blake2b(tok, digest_size=16).hexdigest() + SUFFIX
        digest = f"{zlib.crc32(state, zlib.crc32(tok)):08x}"  # tokens then state, not joined
        header = json.dumps({"namespace": self.namespace, "n_tokens": len(tokens),
                             "state_bytes": len(state), "digest": digest,
                             "created": time.time()}).encode()
        path = self.dir / name
        tmp = self.dir / f"{name}.tmp-{os.getpid()}-{threading.get_ident()}"
        with tmp.open("wb") as f:
            f.write(MAGIC + struct.pack("<I", len(header)) + header)
            f.write(tok)
            f.write(state)
            # Written out now, on this thread, not by the kernel's writeback some seconds
            # later, when it took CPU from whatever decoded then (bench/prefix_cache.py); and
            # a crash after the rename cannot leave a name pointing at an empty file.
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)  # atomic: a reader sees the old file, the new one, or none
        st = path.stat()
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

    def _evict(self) -> None:
        with self._lock:
            entries = list(self._index.values())
        entries.sort(key=_mtime)  # a load touches the file, in this process or another
        total = sum(e.size for e in entries)
        for e in entries:
            if total <= self.max_bytes:
                break
            log.info("[prism] disk cache: evicted %s (%d tokens, %.0f MiB): over %.1f GiB",
                     e.path.name, len(e.tokens), e.size / 2**20, self.max_bytes / 2**30)
            self._unlink(e.path)
            total -= e.size

    def flush(self, timeout: float = 30.0) -> None:
        """Wait until the queued saves are written (tests, close)."""
        deadline = time.monotonic() + timeout
        while self._jobs.unfinished_tasks and time.monotonic() < deadline:
            time.sleep(0.01)

    def close(self, timeout: float = 30.0) -> None:
        self.flush(timeout)
        self._jobs.put(None)
        self._writer.join(timeout)

    def describe(self) -> str:
        return (f"{self.dir}: {len(self)} entries, {self.bytes_used / 2**20:.0f} MiB of "
                f"{self.max_bytes / 2**30:.1f} GiB")
