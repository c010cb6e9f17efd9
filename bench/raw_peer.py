"""The raw peer of bench/peers.py: llama-cpp-python's low-level API with Prism's context, a bare
decode loop, no HTTP, no template, no parser; the ceiling of anything built on the vendored
llama.cpp with those parameters. Not part of the test suite.

bench/peers.py starts it as its own process (its CPU time is read from /proc, as a server's):

    python bench/raw_peer.py --parallel N --n-ctx C --threads T

and writes one JSON request a line to its stdin (`{"prompts": [...], "max_tokens": [...]}`, the
prompts rendered by Prism's template); it answers `{"ready": true}` once loaded, then one JSON
line a request: each sequence's token times, text and prompt tokens.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from engine.backends.llama.context import N_BATCH, open_context


class RawLoop:
    """The raw peer's engine: Prism's model and context (`open_context`), a bare decode loop."""

    def __init__(self, parallel: int, n_ctx: int, threads: int) -> None:
        import ctypes

        import llama_cpp as C

        from engine.chat.packs import resolve_pack

        self.C = C
        # Prism's own model and context, so the parameters cannot drift from the engine's.
        self.model, self.context = open_context(
            resolve_pack("smollm2").gguf, n_ctx=n_ctx, parallel=parallel, n_threads=threads,
            kv_unified=False)
        self.ctx = self.context.ctx
        self.mem = C.llama_get_memory(self.ctx)
        self.vocab = self.model.vocab
        self.n_vocab = C.llama_vocab_n_tokens(self.vocab)
        self.add_bos = bool(C.llama_vocab_get_add_bos(self.vocab))
        self.batch = C.llama_batch_init(N_BATCH, 0, 1)
        self.buf = (ctypes.c_char * 64)()

    def _put(self, i: int, tok: int, pos: int, seq: int, logits: bool) -> None:
        b = self.batch
        b.token[i], b.pos[i], b.n_seq_id[i] = tok, pos, 1
        b.seq_id[i][0], b.logits[i] = seq, logits

    def run(self, texts: list[str], max_tokens: list[int]) -> list[dict]:
        """Each prompt's tokens are packed into n_batch-token steps in sequence order (all of
        them in one step where they fit), then every sequence decodes one token per
        `llama_decode` until its end-of-generation token or its `max_tokens`; one sampler
        chain each, as Prism's for temperature 0 (a neutral repeat penalty, then greedy)."""
        C = self.C
        prompts = [self.model.tokenize(t.encode(), self.add_bos, True) for t in texts]
        b = len(prompts)
        C.llama_memory_clear(self.mem, True)
        chains = []
        for _ in range(b):
            chain = C.llama_sampler_chain_init(C.llama_sampler_chain_default_params())
            C.llama_sampler_chain_add(chain, C.llama_sampler_init_penalties(
                self.n_vocab, 64, 1.0, 0.0, 0.0))
            C.llama_sampler_chain_add(chain, C.llama_sampler_init_greedy())
            chains.append(chain)
        seqs = [{"times": [], "text": [], "prompt_tokens": len(p)} for p in prompts]
        pos = [len(p) for p in prompts]
        pending = [0] * b
        live = [True] * b

        def sample(s: int, row: int) -> None:
            tok = int(C.llama_sampler_sample(chains[s], self.ctx, row))
            if C.llama_vocab_is_eog(self.vocab, tok):
                live[s] = False
                return
            n = C.llama_token_to_piece(self.vocab, tok, self.buf, 64, 0, False)
            seqs[s]["text"].append(bytes(self.buf[:max(n, 0)]))
            seqs[s]["times"].append(time.perf_counter())
            pending[s] = tok
            live[s] = len(seqs[s]["times"]) < max_tokens[s]

        todo = [(s, j) for s in range(b) for j in range(len(prompts[s]))]
        while todo:
            step, todo = todo[:N_BATCH], todo[N_BATCH:]
            lasts = {}
            for i, (s, j) in enumerate(step):
                last = j == len(prompts[s]) - 1
                self._put(i, prompts[s][j], j, s, last)
                if last:
                    lasts[s] = i
            self.batch.n_tokens = len(step)
            assert C.llama_decode(self.ctx, self.batch) == 0
            for s, row in lasts.items():
                sample(s, row)
        while any(live):
            rows = [s for s in range(b) if live[s]]
            for i, s in enumerate(rows):
                self._put(i, pending[s], pos[s], s, True)
                pos[s] += 1
            self.batch.n_tokens = len(rows)
            assert C.llama_decode(self.ctx, self.batch) == 0
            for i, s in enumerate(rows):
                sample(s, i)
        for chain in chains:
            C.llama_sampler_free(chain)
        for seq in seqs:
            seq["text"] = b"".join(seq["text"]).decode("utf-8", "replace")
        return seqs


def worker(parallel: int, n_ctx: int, threads: int) -> None:
    """The raw peer's process: one JSON request a line on stdin, one JSON answer a line."""
    loop = RawLoop(parallel, n_ctx, threads)
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        req = json.loads(line)
        print(json.dumps({"seqs": loop.run(req["prompts"], req["max_tokens"])}), flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--parallel", type=int, default=4)
    ap.add_argument("--n-ctx", type=int, default=8192, help="cells per sequence")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    worker(args.parallel, args.n_ctx, args.threads)
    return 0


if __name__ == "__main__":
    sys.exit(main())
