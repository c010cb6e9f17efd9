"""The GGUF reader: a model file's key/value metadata, nothing else.

Owns `read_gguf_metadata` and `GGUFError`. It parses the key/value header only (through mmap, so
a 250 MB model costs a few page reads) and skips arrays except those asked for (the token list).
Standard library only, no state; any thread may call it (startup reads the pack's GGUF, the llama
backend its KV shape). At the bottom of engine's layers: the packs, the KV plan and the doctor
read models through it, so none of them needs the others.
"""

from __future__ import annotations

import mmap
import struct
from pathlib import Path
from typing import Any


class GGUFError(Exception):
    """The file is not a readable GGUF (missing, truncated, another format, too old)."""


# --- GGUF metadata ----------------------------------------------------------------------------
# Layout (v2/v3): "GGUF", u32 version, u64 tensor count, u64 kv count, then per kv: a string key
# (u64 length + UTF-8), a u32 value type and the value. Arrays are u32 item type, u64 count, items.

_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?",
            10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9


class _Reader:
    def __init__(self, buf: Any) -> None:
        self.buf, self.pos = buf, 0

    def unpack(self, fmt: str) -> Any:
        (value,) = struct.unpack_from(fmt, self.buf, self.pos)
        self.pos += struct.calcsize(fmt)
        return value

    def string(self) -> str:
        n = self.unpack("<Q")
        self.pos += n
        return bytes(self.buf[self.pos - n : self.pos]).decode("utf-8", errors="replace")

    def value(self, vtype: int, keep: bool) -> Any:
        if vtype in _SCALARS:
            return self.unpack(_SCALARS[vtype])
        if vtype == _STRING:
            return self.string()
        if vtype != _ARRAY:
            raise ValueError(f"unknown GGUF value type {vtype}")
        itype, count = self.unpack("<I"), self.unpack("<Q")
        if keep:
            return [self.value(itype, keep) for _ in range(count)]
        if itype in _SCALARS:  # skipped arrays cost nothing: jump over fixed-size items,
            self.pos += count * struct.calcsize(_SCALARS[itype])
        elif itype == _STRING:  # and over strings without decoding them
            for _ in range(count):
                n = self.unpack("<Q")  # not `pos += unpack()`: pos would be read first
                self.pos += n
        else:
            for _ in range(count):
                self.value(itype, keep)
        return None


def read_gguf_metadata(path: str | Path, arrays: tuple[str, ...] = ()) -> dict[str, Any]:
    """The GGUF's key/value metadata. Arrays are skipped (value None) unless named in `arrays`.
    Raises GGUFError when the file is not a readable GGUF."""
    try:
        with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
            r = _Reader(buf)
            if bytes(buf[:4]) != b"GGUF":
                raise GGUFError(f"{path} is not a GGUF file")
            r.pos = 4
            version = r.unpack("<I")
            if version < 2:
                raise GGUFError(f"{path}: GGUF version {version} is too old")
            r.unpack("<Q")  # tensor count
            meta: dict[str, Any] = {}
            for _ in range(r.unpack("<Q")):
                key = r.string()
                meta[key] = r.value(r.unpack("<I"), key in arrays)
            return meta
    except (OSError, ValueError, struct.error) as exc:
        raise GGUFError(f"cannot read GGUF metadata from {path}: {exc}") from exc


