"""Reuse from disk, and where a prompt left the caches: the disk half of a slot's KV reuse.

Owns `DiskReuse`: the glue between the Batcher (engine/backends/llama/batch.py) and the disk
cache (engine/backends/llama/disk_cache.py) — loading a saved prefix into a slot when it beats
what the slot (or a borrowed split cache) already holds, snapshotting a finished sequence for
the writer thread — and `prefix_match`, the cache forensics every admitted job gets
(`Finish.prefix`, engine/backends/base.py). Runs only on the engine's worker thread
("prism-llama"): every call here touches the llama context.

Loading reads the file on the engine thread (one sequential read and a digest: ~1 s for 7k
tokens of the default model, 160 MB, on the loaded dev box), which other sequences wait for;
saving only copies the state out of the context here (`llama_state_seq_get_data` into a
buffer handed to the writer as is), once no other sequence decodes (`persist`), and hashes and
writes it on the cache's own thread.
"""

from __future__ import annotations

import ctypes
import logging
from typing import Any

from engine.backends.base import PrefixMatch
from engine.backends.llama.disk_cache import DiskCache, Entry, common_prefix
from engine.backends.llama.slots import Slot
from engine.backends.llama.vocab import piece

log = logging.getLogger("prism")

SHOWN_TOKENS = 24  # tokens of text either side keeps in a PrefixMatch


class DiskReuse:
    """See the module docstring."""

    def __init__(self, cache: DiskCache, ctx: Any, mem: Any) -> None:
        self.cache = cache
        self._ctx = ctx
        self._mem = mem

    def load(self, slot: Slot, prompt: list[int], best: tuple[Entry | None, int], keep: int,
             free_cells: int | None) -> int:
        """Load `best` (the entry `DiskCache.best` found for `prompt`, and the prefix they
        share) into `slot` if it beats `keep` tokens; the tokens the slot reuses now (its `kv`
        updated), `keep` when nothing was loaded, 0 when a failed load emptied the slot.
        `free_cells`: what a unified pool has left beside the slot's own cells (None: split)."""
        import llama_cpp as C

        entry, n = best
        n = min(n, len(prompt) - 1)  # the last prompt token is decoded again: its logits
        if entry is None or not self.cache.worth_loading(entry, n, keep):
            return keep
        if free_cells is not None and len(entry.tokens) > free_cells + len(slot.kv):
            return keep  # the whole state lands before it is cut: no room in the pool now
        data = self.cache.read(entry)
        if data is None:
            return keep
        C.llama_memory_seq_rm(self._mem, slot.seq, 0, -1)
        slot.kv.clear()
        buf = (ctypes.c_uint8 * len(data)).from_buffer(data)
        if not C.llama_state_seq_set_data(self._ctx, buf, len(data), slot.seq):
            log.warning("[prism] disk cache: llama.cpp refused %s; prefilling instead",
                        entry.path.name)
            C.llama_memory_seq_rm(self._mem, slot.seq, 0, -1)
            return 0
        if not C.llama_memory_seq_rm(self._mem, slot.seq, n, -1):  # e.g. a recurrent model
            C.llama_memory_seq_rm(self._mem, slot.seq, 0, -1)
            return 0
        slot.kv[:] = entry.tokens[:n]
        return n

    def persist(self, slot: Slot) -> None:
        """Snapshot `slot`'s sequence if its last job's state is not saved yet (`Slot.unsaved`).
        Why deferred: copying a long state out of the context holds the engine thread (about
        100 ms for 8k tokens of the default model), so every sequence decoding beside a save
        would wait for it (bench/prefix_cache.py --part neighbour). The Batcher marks a
        finished job's slot unsaved and calls this when no other job runs (`persist_idle`),
        just before the slot's cells are cut or dropped for another job, and at close; until
        then the slot holds the state."""
        if not slot.unsaved:
            return
        slot.unsaved = False
        try:
            self.save(slot)
        except Exception:  # a failed snapshot costs a later prefill, never the engine thread
            log.exception("[prism] disk cache: snapshot failed")

    def persist_idle(self, slots: list[Slot]) -> None:
        for slot in slots:
            if slot.active is None:
                self.persist(slot)

    def save(self, slot: Slot) -> bool:
        """Snapshot `slot`'s sequence for the writer thread when it is worth keeping."""
        import llama_cpp as C

        if not self.cache.worth_saving(slot.kv):
            return False
        size = C.llama_state_seq_get_size(self._ctx, slot.seq)
        buf = (ctypes.c_uint8 * size)()
        got = C.llama_state_seq_get_data(self._ctx, buf, size, slot.seq)
        if got == 0:
            return False
        # The ctypes buffer itself goes to the writer: a bytes() copy of it doubled the time the
        # engine thread held the other sequences (bench/prefix_cache.py: ~half of 514 ms).
        self.cache.save(slot.kv, memoryview(buf).cast("B")[:got])  # it copies the tokens
        return True


def prefix_match(prompt: list[int], slots: list[Slot], disk: tuple[Entry | None, int],
                 vocab: Any, skip_bos: bool) -> PrefixMatch:
    """Where `prompt` leaves the longest prefix any slot (busy or idle) or the disk cache's
    best entry (`disk`, as `DiskCache.best` returns it) holds."""
    held, source, other = 0, "", []
    for s in slots:
        n = common_prefix(s.kv, prompt)
        if n > held:
            held, source, other = n, "slot", s.kv
    entry, n = disk
    if entry is not None and n > held:
        held, source, other = n, "disk", entry.tokens
    start = 1 if skip_bos and prompt else 0  # the BOS the tokenizer adds is not prompt text

    def text(ids: list[int]) -> str:
        return b"".join(piece(vocab, t, True) for t in ids).decode("utf-8", "replace")

    return PrefixMatch(
        held=held,
        source=source,
        prompt_char=len(text(prompt[start:held])) if held > start else 0,
        cached_text=text(other[held:held + SHOWN_TOKENS]),
        prompt_text=text(prompt[held:held + SHOWN_TOKENS]),
    )
