"""The GGUF reader: a model file's key/value metadata, nothing else.

Owns `read_gguf_metadata`, `GGUFError`, `check_complete` (the tensors' data lies within the
file: a cut download is named before llama.cpp is asked to load it) and `quant_name` (a
`general.file_type` as llama.cpp names it). It parses the header only (through mmap, so
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


def _header(r: _Reader, path: str | Path, arrays: tuple[str, ...]) -> tuple[int, dict]:
    """(tensor count, metadata), the reader left at the first tensor info."""
    if bytes(r.buf[:4]) != b"GGUF":
        raise GGUFError(f"{path} is not a GGUF file")
    r.pos = 4
    version = r.unpack("<I")
    if version < 2:
        raise GGUFError(f"{path}: GGUF version {version} is too old")
    tensors = r.unpack("<Q")
    meta: dict[str, Any] = {}
    for _ in range(r.unpack("<Q")):
        key = r.string()
        meta[key] = r.value(r.unpack("<I"), key in arrays)
    return tensors, meta


def read_gguf_metadata(path: str | Path, arrays: tuple[str, ...] = ()) -> dict[str, Any]:
    """The GGUF's key/value metadata. Arrays are skipped (value None) unless named in `arrays`.
    Raises GGUFError when the file is not a readable GGUF."""
    try:
        with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
            return _header(_Reader(buf), path, arrays)[1]
    except (OSError, ValueError, struct.error) as exc:
        raise GGUFError(f"cannot read GGUF metadata from {path}: {exc}") from exc


# --- completeness -----------------------------------------------------------------------------
# After the metadata: per tensor a string name, u32 n_dims, n_dims u64 dims, u32 ggml type and
# a u64 offset into the data, which starts at the next multiple of `general.alignment` (32).
# A tensor's size is its element count / block size * bytes per block (ggml's type traits, as
# gguf-py's GGML_QUANT_SIZES lists them; Q8_1 as ggml has it now, two halves and 32 bytes);
# a type not listed here counts only its offset, so the check never refuses a file that fits.
_BLOCKS = {
    0: (1, 4), 1: (1, 2), 2: (32, 18), 3: (32, 20), 6: (32, 22), 7: (32, 24), 8: (32, 34),
    9: (32, 36), 10: (256, 84), 11: (256, 110), 12: (256, 144), 13: (256, 176), 14: (256, 210),
    15: (256, 292), 16: (256, 66), 17: (256, 74), 18: (256, 98), 19: (256, 50), 20: (32, 18),
    21: (256, 110), 22: (256, 82), 23: (256, 136), 24: (1, 1), 25: (1, 2), 26: (1, 4),
    27: (1, 8), 28: (1, 8), 29: (256, 56), 30: (1, 2), 34: (256, 54), 35: (256, 66),
    39: (32, 17), 40: (64, 36), 41: (128, 18),
}


def check_complete(path: str | Path) -> None:
    """Raise GGUFError when the file is not a readable GGUF or is shorter than its tensors'
    data (a download or copy cut short): llama.cpp would refuse it only after reading it."""
    try:
        with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
            r = _Reader(buf)
            tensors, meta = _header(r, path, ())
            if not tensors:
                return  # metadata alone (a vocabulary file): nothing to cut short
            end = 0
            for _ in range(tensors):
                r.string()
                dims = [r.unpack("<Q") for _ in range(r.unpack("<I"))]
                ggml_type, offset = r.unpack("<I"), r.unpack("<Q")
                block, size = _BLOCKS.get(ggml_type, (1, 0))
                count = 1
                for d in dims:
                    count *= d
                end = max(end, offset + count // block * size)
            align = meta.get("general.alignment")
            align = align if isinstance(align, int) and align > 0 else 32
            need = -(-r.pos // align) * align + end
            have = len(buf)
    except (OSError, ValueError, struct.error) as exc:
        raise GGUFError(f"cannot read GGUF {path}: {exc}") from exc
    if have < need:
        raise GGUFError(f"{path} is truncated: {have:,} bytes of the {need:,} its tensors take "
                        "(a download or copy cut short?)")


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
