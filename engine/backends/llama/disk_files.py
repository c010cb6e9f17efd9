"""The disk prompt cache's files, read as untrusted input: opening, header checks, writing.

Owns the file format of engine/backends/llama/disk_cache.py (magic, header, tokens, state),
what counts as a readable file, the locked temporary file a save is written to, and which
temporary files a crashed writer left. Runs on whichever thread calls it: the engine thread
("prism-llama") reads headers and states, the cache's writer ("prism-kv-save") writes.

Why untrusted: the cache folder is a folder on disk anyone with the user's rights can put
anything in (a FIFO, a directory, a symlink to a device, a file with a JSON header of the wrong
shape), and a single such file stopped every start of the server. So only regular files are
opened (never through a symlink, never blocking on a FIFO), every header field is type-checked
before use, and whatever fails is a `BadFile` whose message names no path: the caller logs it
with the file's name and serves without it.

A save's temporary file is locked (`flock`) for as long as its writer lives, so a temporary
file nobody holds a lock on was left by a writer that crashed or was killed, and is removed at
once, in this process or another; where `flock` does not exist (Windows), after STALE_TMP_S.
"""

from __future__ import annotations

import contextlib
import errno
import io
import json
import os
import re
import stat
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

try:
    import fcntl
except ImportError:  # Windows: temporary files are aged out instead
    fcntl = None  # type: ignore[assignment]

MAGIC = b"PRISMKV2"  # 1: blake2b digests (those files sit in another namespace)
SUFFIX = ".kv"
TMP_MARK = ".tmp-"
HEAD = 12  # magic and the u32 header length
MAX_HEADER = 64 * 2**10  # a real header is ~200 bytes; a claimed 4 GiB one is not read
STALE_TMP_S = 3600.0  # without flock: a temporary file this old was left by a crashed writer
CHUNK = 8 * 2**20  # bytes a save writes between two looks at whether it is abandoned
OWN_NAME = re.compile(r"[0-9a-f]{32}\.kv(\.tmp-[0-9]+-[0-9]+)?")  # the names this cache writes
DISK_FULL = {errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)}


class BadFile(Exception):
    """A cache file that cannot be used; the message says why and names no path."""


class Abandoned(Exception):
    """A save given up because the cache closed before it could finish."""


@dataclass(frozen=True)
class Header:
    namespace: str
    n_tokens: int
    state_bytes: int
    digest: str  # CRC-32 of tokens then state, 8 hex digits
    length: int  # of the JSON, as the file says

    @property
    def file_bytes(self) -> int:
        return HEAD + self.length + 4 * self.n_tokens + self.state_bytes


def is_regular(p: Path) -> os.stat_result | None:
    """`p`'s own status (a symlink is not followed) when it is a regular file, else None."""
    try:
        st = p.lstat()
    except OSError:
        return None
    return st if stat.S_ISREG(st.st_mode) else None


def open_regular(p: Path) -> int:
    """A read-only descriptor of `p`, which must be a regular file: never follows a symlink,
    never blocks on a FIFO, never opens a device (checked before and, race-free, after)."""
    if is_regular(p) is None:
        raise BadFile("not a regular file")
    flags = (os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOFOLLOW", 0)
             | getattr(os, "O_BINARY", 0))
    try:
        fd = os.open(p, flags)
    except OSError as e:
        raise BadFile(f"cannot open it ({e.strerror or type(e).__name__})") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):  # swapped for something else since the lstat
        os.close(fd)
        raise BadFile("not a regular file")
    return fd


def read_exactly(fd: int, n: int) -> bytes:
    parts, got = [], 0
    while got < n:
        b = os.read(fd, min(n - got, CHUNK))
        if not b:
            break
        parts.append(b)
        got += len(b)
    return b"".join(parts)


def read_all(fd: int) -> bytearray:
    """The whole file behind `fd`, read into one buffer (no copies: a state is ~180 MB)."""
    buf = bytearray(os.fstat(fd).st_size)
    view, got = memoryview(buf), 0
    with io.FileIO(fd, "rb", closefd=False) as f:
        while got < len(buf):
            n = f.readinto(view[got:])
            if not n:
                break
            got += n
    view.release()
    if got < len(buf):  # cut short since the fstat: the digest check refuses it
        del buf[got:]
    return buf


def parse_header(head: bytes, read: Callable[[int], bytes]) -> Header:
    """The header after the 12 bytes `head`, `read(n)` giving the next n bytes of the file.
    Every field is checked for its type: a header of the wrong shape is a BadFile."""
    if len(head) < HEAD or head[:8] != MAGIC:
        raise BadFile("not a Prism KV file")
    (length,) = struct.unpack("<I", head[8:HEAD])
    if length > MAX_HEADER:
        raise BadFile(f"header of {length} bytes")
    raw = read(length)
    try:
        h = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        raise BadFile("header is not JSON") from None
    if not isinstance(h, dict):
        raise BadFile(f"header is a JSON {type(h).__name__}, not an object")
    ns, digest = h.get("namespace"), h.get("digest")
    if not isinstance(ns, str):
        raise BadFile("header's namespace is not a string")
    counts = {}
    for key in ("n_tokens", "state_bytes"):
        v = h.get(key)
        if type(v) is not int or v < 0:  # bool is an int subclass, and not a count
            raise BadFile(f"header's {key} is not a count: {str(v)[:40]!r}")
        counts[key] = v
    if not (isinstance(digest, str) and re.fullmatch(r"[0-9a-f]{8}", digest)):
        raise BadFile("header's digest is not 8 hex digits")
    return Header(ns, counts["n_tokens"], counts["state_bytes"], digest, length)


def header_bytes(namespace: str, n_tokens: int, state_bytes: int, digest: str) -> bytes:
    header = json.dumps({"namespace": namespace, "n_tokens": n_tokens,
                         "state_bytes": state_bytes, "digest": digest,
                         "created": time.time()}).encode()
    return MAGIC + struct.pack("<I", len(header)) + header


def write_file(tmp: Path, path: Path, parts: list[bytes | memoryview],
               abandoned: Callable[[], bool]) -> None:
    """Write `parts` to the new file `tmp` (locked while it is written), fsync it and rename it
    to `path`. On any failure, or when `abandoned()` turns true between two chunks, `tmp` is
    removed and the error (or Abandoned) raised: `path` is a whole file or untouched."""
    flags = (os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
             | getattr(os, "O_BINARY", 0))
    fd = os.open(tmp, flags, 0o666)
    try:
        if fcntl is not None:
            with contextlib.suppress(OSError):  # a filesystem without locks: aged out instead
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        for part in parts:
            view = memoryview(part).cast("B")
            while view:
                if abandoned():
                    raise Abandoned
                view = view[os.write(fd, view[:CHUNK]):]
        # Written out now, on the writer thread, not by the kernel's writeback some seconds
        # later, when it took CPU from whatever decoded then (bench/prefix_cache.py); and a
        # crash after the rename cannot leave a name pointing at an empty file.
        os.fsync(fd)
        if abandoned():
            raise Abandoned
        os.replace(tmp, path)  # atomic: a reader sees the old file, the new one, or none
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    finally:
        os.close(fd)


def stale_tmp(p: Path, now: float) -> bool:
    """Was the temporary file `p` left by a writer that is gone? Only this cache's own names,
    and only regular files: anything else in the folder is not ours to delete."""
    if not OWN_NAME.fullmatch(p.name) or TMP_MARK not in p.name:
        return False
    st = is_regular(p)
    if st is None:
        return False
    if fcntl is not None:
        try:
            fd = open_regular(p)
        except BadFile:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True  # nobody holds it: its writer is gone (the unlink follows at once)
        except BlockingIOError:
            return False  # a live writer, in this process or another
        except OSError:
            pass  # a filesystem without locks: by age
        finally:
            os.close(fd)
    return now - st.st_mtime > STALE_TMP_S


def folder_bytes(folder: Path) -> int:
    """What the regular files in `folder` take, whoever wrote them (foreign files and other
    writers' temporary files count against --cache-size too)."""
    total = 0
    try:
        with os.scandir(folder) as it:
            for e in it:
                with contextlib.suppress(OSError):
                    st = e.stat(follow_symlinks=False)
                    if stat.S_ISREG(st.st_mode):
                        total += st.st_size
    except OSError:
        pass
    return total
