"""How long a context to give a model when the user does not say: its trained context, capped
by a memory budget for the KV cache.

Owns `ContextPlan` and `plan_context`. Clients send long prompts: Open WebUI attaches its
built-in tools to every chat (about 9k tokens), Codex's first request is 4.5k tokens, Claude
Code's 7.6k. A fixed 4096 refused all of them (issue 9, item 5), while a model's trained context
(Qwen3: 40960, some 262144) can need more KV cache than the machine has. So the default is the
trained context, unless its KV cache (K and V, f16, every layer, from the GGUF's metadata)
passes the budget: a quarter of the machine's memory. Pure arithmetic on metadata read without
loading the model; runs on the main thread at start-up.

Also owns `KVPlan` and `plan_kv`: how N parallel sequences hold their KV cache. Split caches
(one of `n_ctx` cells per sequence) when N of them fit the same budget, else llama.cpp's
unified pool of `n_ctx` cells that the sequences share. Both let one request use the whole
context beside the others; split costs N times the memory, and the pool costs speed: every
step attends over every cached cell in it, idle slots' caches included, so one stream on a
4-sequence pool decodes at 0.87x a lone context against 0.97x with split caches
(bench/kv_layout.py), and a pool can fill (engine/backends/llama/batch.py says what happens then).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from engine.gguf import GGUFError, read_gguf_metadata

FALLBACK_CTX = 4096  # when the GGUF names no trained context
STEP = 256  # a capped context is a multiple of this
BUDGET_SHARE = 4  # the KV cache may take 1/BUDGET_SHARE of the machine's memory
FALLBACK_MEMORY = 16 * 2**30  # when the machine's memory cannot be read


@dataclass(frozen=True, slots=True)
class ContextPlan:
    n_ctx: int
    trained: int | None  # the model's trained context, when its GGUF says
    kv_per_token: int | None  # KV cache bytes per token of context, when known
    budget: int  # bytes the KV cache may take
    budget_origin: str = ""  # why that much, for the message

    @property
    def capped(self) -> bool:
        return self.trained is not None and self.n_ctx < self.trained

    def describe(self) -> str:
        """One line for the terminal: the size, and why."""
        kv = self.kv_per_token
        size = f"; its KV cache takes {_mib(kv * self.n_ctx)}" if kv else ""
        if self.capped:
            return (f"context {self.n_ctx} tokens: the model was trained for {self.trained}, "
                    f"whose KV cache ({_mib(kv * self.trained)}) would pass the memory budget "
                    f"of {_mib(self.budget)}{self.budget_origin}; --n-ctx N sets it")
        if self.trained is None:
            return f"context {self.n_ctx} tokens (the GGUF names no trained context){size}"
        return f"context {self.n_ctx} tokens, the model's trained context{size}"


def _mib(n: int) -> str:
    return f"{n / 2**30:.1f} GiB" if n >= 2**30 else f"{n / 2**20:.0f} MiB"


def memory_bytes() -> int:
    """The machine's physical memory (POSIX), else FALLBACK_MEMORY."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return FALLBACK_MEMORY


def kv_bytes_per_token(meta: dict) -> int | None:
    """K and V in f16 for one token, over every layer, from GGUF metadata (None if unknown).
    Grouped-query attention is counted (head_count_kv); per-layer head counts (arrays) are
    summed."""
    arch = meta.get("general.architecture")
    layers = meta.get(f"{arch}.block_count")
    embd = meta.get(f"{arch}.embedding_length")
    heads = meta.get(f"{arch}.attention.head_count")
    heads_kv = meta.get(f"{arch}.attention.head_count_kv", heads)
    if not all(isinstance(v, int) and v > 0 for v in (layers, embd, heads)):
        return None
    key_len = meta.get(f"{arch}.attention.key_length") or embd // heads
    value_len = meta.get(f"{arch}.attention.value_length") or embd // heads
    if isinstance(heads_kv, list):  # per layer
        total_kv = sum(h for h in heads_kv if isinstance(h, int))
    elif isinstance(heads_kv, int):
        total_kv = heads_kv * layers
    else:
        return None
    return total_kv * (key_len + value_len) * 2


def plan_context(gguf: Path | str | None, budget: int | None = None) -> ContextPlan:
    """The default context for this GGUF (see the module docstring)."""
    origin = ""
    if budget is None:
        budget, origin = memory_bytes() // BUDGET_SHARE, " (a quarter of this machine's memory)"
    meta: dict = {}
    if gguf is not None:
        try:
            meta = read_gguf_metadata(gguf)
            key = f"{meta.get('general.architecture')}.attention.head_count_kv"
            if key in meta and meta[key] is None:  # an array (per layer): read it this time
                meta = read_gguf_metadata(gguf, arrays=(key,))
        except GGUFError:
            meta = {}
    arch = meta.get("general.architecture")
    trained = meta.get(f"{arch}.context_length")
    trained = trained if isinstance(trained, int) and trained > 0 else None
    kv = kv_bytes_per_token(meta)
    n_ctx = trained or FALLBACK_CTX
    if kv and n_ctx * kv > budget:
        n_ctx = max(STEP, budget // kv // STEP * STEP)
    return ContextPlan(n_ctx=n_ctx, trained=trained, kv_per_token=kv, budget=budget,
                       budget_origin=origin)


class KVLayout(Enum):
    """`--kv-layout`: how the sequences of one context hold their KV cache."""

    AUTO = "auto"  # split when N caches fit the budget, else unified
    SPLIT = "split"  # one cache of n_ctx cells per sequence
    UNIFIED = "unified"  # one pool of n_ctx cells shared by the sequences


@dataclass(frozen=True, slots=True)
class KVPlan:
    unified: bool
    total: int | None  # bytes of KV cache for every sequence, when known
    reason: str  # why this layout, for the terminal


def plan_kv(n_ctx: int, parallel: int, kv_per_token: int | None, budget: int,
            layout: KVLayout = KVLayout.AUTO) -> KVPlan:
    """The KV layout for `parallel` sequences of `n_ctx` tokens each (module docstring).
    One sequence is a unified pool of one: the same context `--parallel 1` always had."""
    split_bytes = kv_per_token * n_ctx * parallel if kv_per_token else None
    pool_bytes = kv_per_token * n_ctx if kv_per_token else None
    if parallel == 1:
        return KVPlan(True, pool_bytes, "one sequence")
    if layout is KVLayout.SPLIT:
        return KVPlan(False, split_bytes, "--kv-layout split")
    if layout is KVLayout.UNIFIED:
        return KVPlan(True, pool_bytes, "--kv-layout unified")
    if split_bytes is None:
        return KVPlan(True, None, "the KV cache's size is unknown, so one shared pool")
    if split_bytes <= budget:
        return KVPlan(False, split_bytes, f"{parallel} caches of {_mib(pool_bytes)} fit the "
                      f"memory budget of {_mib(budget)}")
    return KVPlan(True, pool_bytes, f"{parallel} caches of {_mib(pool_bytes)} "
                  f"({_mib(split_bytes)}) would pass the memory budget of {_mib(budget)}")
