"""`--no-embeddings` and `--embed-ctx`: the options of /v1/embeddings' local worker, and its wiring.

Owns `add_arguments` (shared by `gui` and `serve`, through app/config.py) and `embedder_for`,
which gives the service an `Embedder` (engine/backends/llama/embed.py) over the engine's own
GGUF: nothing loads until the first embedding request, so the default costs nothing. A replay
or an `--upstream` engine gets none (an upstream's embeddings are passed through by
app/api/embeddings.py). Runs on the main thread at start-up.
"""

from __future__ import annotations

import argparse
import logging

from engine.backends.llama.embed import DEFAULT_CTX, Embedder, EmbedUnavailable

log = logging.getLogger("prism")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--no-embeddings", action="store_true",
                   help="answer POST /v1/embeddings with an error instead of loading a second "
                   "copy of the model, with mean pooling, on first use")
    p.add_argument("--embed-ctx", type=int, default=None, metavar="N",
                   help=f"the most tokens one embedding input may have (default {DEFAULT_CTX}, "
                   "or the model's trained context if smaller)")


def embedder_for(args: argparse.Namespace, engine: object) -> Embedder | None:
    """The local engine's embedder, or None (no local model, or --no-embeddings)."""
    path = getattr(engine, "model_path", None)
    if path is None or getattr(args, "no_embeddings", False):
        return None
    try:
        return Embedder(path, n_ctx=getattr(args, "embed_ctx", None),
                        n_threads=getattr(args, "threads", None),
                        n_gpu_layers=getattr(args, "n_gpu_layers", 0) or 0)
    except EmbedUnavailable as e:  # the model loaded for generation: not expected
        log.warning("[prism] embeddings off: %s", e)
        return None
