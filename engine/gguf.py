"""The GGUF reader: a model file's key/value metadata, nothing else.

Owns `read_gguf_metadata`, `GGUFError` and `quant_name` (a `general.file_type` as llama.cpp
names it). It parses the key/value header only (through mmap, so
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


# --- quantization -----------------------------------------------------------------------------
# `general.file_type` is llama.cpp's `llama_ftype` enum (llama-cpp-python's LLAMA_FTYPE_*
# constants): the type most tensors were quantized to. Gaps are types llama.cpp removed.
FILE_TYPES = {
    0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 7: "Q8_0", 8: "Q5_0", 9: "Q5_1", 10: "Q2_K",
    11: "Q3_K_S", 12: "Q3_K_M", 13: "Q3_K_L", 14: "Q4_K_S", 15: "Q4_K_M", 16: "Q5_K_S",
    17: "Q5_K_M", 18: "Q6_K", 19: "IQ2_XXS", 20: "IQ2_XS", 21: "Q2_K_S", 22: "IQ3_XS",
    23: "IQ3_XXS", 24: "IQ1_S", 25: "IQ4_NL", 26: "IQ3_S", 27: "IQ3_M", 28: "IQ2_S", 29: "IQ2_M",
    30: "IQ4_XS", 31: "IQ1_M", 32: "BF16", 36: "TQ1_0", 37: "TQ2_0", 38: "MXFP4_MOE",
    39: "NVFP4", 40: "Q1_0", 41: "Q2_0",
}


def quant_name(file_type: object) -> str:
    """The name of a `general.file_type` value ("Q4_K_M"); "unknown" when the file has none,
    and "type N" for a number this table does not know (a newer llama.cpp's)."""
    if isinstance(file_type, bool) or not isinstance(file_type, int):
        return "unknown"
    return FILE_TYPES.get(file_type, f"type {file_type}")
