"""The llama.cpp model and context the Batcher decodes with, and why each parameter is what it is.

Owns `open_context`, which loads the weights and makes the one context that N sequences share
(engine/backends/llama/batch.py), and the names of its settings (`N_BATCH`, `FLASH_ATTN`).
Runs on the engine's worker thread ("prism-llama"), which alone touches what it returns.
"""

from __future__ import annotations

import multiprocessing
from pathlib import Path
from typing import Any

N_BATCH = 512  # tokens per decode step (llama-cpp-python's default n_batch)
# --flash-attn's values and llama.cpp's names for them.
FLASH_ATTN = {"auto": "LLAMA_FLASH_ATTN_TYPE_AUTO", "on": "LLAMA_FLASH_ATTN_TYPE_ENABLED",
              "off": "LLAMA_FLASH_ATTN_TYPE_DISABLED"}


def open_context(model_path: Path, *, n_ctx: int, parallel: int, n_gpu_layers: int = 0,
                 n_threads: int | None = None, kv_unified: bool = True, verbose: bool = False,
                 flash_attn: str = "auto") -> tuple[Any, Any]:
    """(llama-cpp-python's LlamaModel, its LlamaContext) for `parallel` sequences of `n_ctx`
    tokens each: one pool of n_ctx cells they share (`kv_unified`), or a cache of n_ctx cells
    per sequence."""
    import llama_cpp as C
    from llama_cpp import _internals

    mp = C.llama_model_default_params()
    mp.n_gpu_layers = n_gpu_layers
    # verbose=True whatever `verbose` says: otherwise llama-cpp-python silences the whole
    # process's stdout/stderr while loading (llama.cpp logs via engine/backends/llama/log.py).
    model = _internals.LlamaModel(path_model=str(model_path), params=mp, verbose=True)
    cp = C.llama_context_default_params()
    # Split caches (kv_unified False): n_ctx cells for each sequence.
    cp.n_ctx = n_ctx if kv_unified else n_ctx * parallel
    cp.n_batch = cp.n_ubatch = min(n_ctx, N_BATCH)
    cp.n_seq_max = parallel
    cp.kv_unified = kv_unified
    # llama-cpp-python's defaults: half the cores to decode one token, all of them for batches.
    cp.n_threads = n_threads or max(multiprocessing.cpu_count() // 2, 1)
    cp.n_threads_batch = n_threads or multiprocessing.cpu_count()
    # Flash attention as llama-server has it (`-fa auto`: on where the backend runs it for this
    # model). On the CPU it is worth +2-4% at one sequence, +5-8% at four and +13-15% at eight
    # (bench/batched.py); llama-cpp-python's Llama() leaves it off.
    cp.flash_attn_type = getattr(C, FLASH_ATTN[flash_attn])
    return model, _internals.LlamaContext(model=model, params=cp, verbose=verbose)
