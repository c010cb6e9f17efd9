"""Parallel sequences benchmark (`python bench/server.py --concurrency 1,2,4,8`): what several
clients at once get from `prism serve --parallel N`, against a bare low-level decode loop as the
ceiling. Prints its figures; not part of the test suite.

Measured, each a median over `--runs` rounds, on the default model with `--threads` (default 1)
in every process, with the server's KV layout (`--kv-layout`, default auto: split caches here)
in the bare loop too:
  bare   B sequences in one llama.cpp context, one token each per `llama_decode`, greedy,
         in-process: decode tokens/s (the issue's ceiling), and end to end (the B prompts'
         prefill in one batch included).
  http   C concurrent streaming `openai` SDK clients against `prism serve` at its default
         `--parallel 4` (C <= 4), else at `--parallel max(C)`,
         every client the same prompt ("same") or each its own ("diff"). Two figures, each
         against bare's like figure at B = C (target: decode >= 0.9):
           decode  tokens/s over the span where all C are generating (first content token of
                   the last to start to the last token of the first to end): what the bare
                   loop's decode figure measures;
           e2e     all tokens over the span from the requests to the last token: prefill,
                   HTTP, templating and the SDKs included. Requests arrive one by one, so the
                   first is prefilled alone and the others' prompts come in a later step
                   beside its tokens (up to a second here), time that no decode loop avoids.
  single one client on `--parallel 4` against one on `--parallel 1` (decode tokens/s).
         Target: >= 0.97.
  short  time to first token of a short request sent while a long one generates, on
         `--parallel 1` (it waits for the long one) and `--parallel 4`. Target: < 1 s.
  engine Prism's engine alone with max(C) jobs at once: the share of wall time spent inside
         `llama_decode` (the rest is Prism's loop: batching, sampling, stop gates).

The bare loop runs on this process's main thread; each server is its own process, and the
clients are threads of this one.
"""

from __future__ import annotations

import statistics
import threading
import time

from bench.common import ROOT, SAMPLING, free_port, wait_http

LONG_Q = ("Write a long, detailed story about a lighthouse keeper who finds an old map hidden "
          "in the wall. Describe the sea, the weather and the town.")


def chatml(user: str) -> str:
    return (f"<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
            f"<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n")


def bare_loop(model: str, b: int, steps: int, threads: int,
              unified: bool) -> tuple[float, float]:
    """B greedy sequences, one token each per llama_decode: (decode tokens/s, end-to-end
    tokens/s with the prompts' prefill in one batch)."""
    import llama_cpp as C
    import numpy as np
    from llama_cpp import _internals

    mp = C.llama_model_default_params()
    m = _internals.LlamaModel(path_model=model, params=mp, verbose=False)
    cp = C.llama_context_default_params()
    # As engine/backends/llama/batch.py lays it out: split caches hold 2048 cells per sequence.
    cp.n_ctx = 2048 if unified else 2048 * b
    cp.n_batch, cp.n_ubatch, cp.n_seq_max, cp.kv_unified = 512, 512, b, unified
    cp.n_threads = cp.n_threads_batch = threads
    cp.flash_attn_type = C.LLAMA_FLASH_ATTN_TYPE_DISABLED
    ctx = _internals.LlamaContext(model=m, params=cp, verbose=False)
    batch = C.llama_batch_init(512, 0, 1)
    vocab = m.vocab
    n_vocab = C.llama_vocab_n_tokens(vocab)

    def put(i, tok, pos, seq, logits):
        batch.token[i], batch.pos[i], batch.n_seq_id[i] = tok, pos, 1
        batch.seq_id[i][0], batch.logits[i] = seq, logits

    def argmax(row: int) -> int:
        return int(np.argmax(np.ctypeslib.as_array(C.llama_get_logits_ith(ctx.ctx, row),
                                                   shape=(n_vocab,))))

    pos, rows = [], []
    n = 0
    t_start = time.perf_counter()
    for s in range(b):
        ids = m.tokenize(chatml(f"Story number {s}. {LONG_Q}").encode(), False, True)
        for j, t in enumerate(ids):
            put(n + j, t, j, s, j == len(ids) - 1)
        n += len(ids)
        pos.append(len(ids))
        rows.append(n - 1)
    batch.n_tokens = n
    assert C.llama_decode(ctx.ctx, batch) == 0
    last = [argmax(r) for r in rows]
    t0 = time.perf_counter()
    for _ in range(steps):
        for s in range(b):
            put(s, last[s], pos[s], s, True)
            pos[s] += 1
        batch.n_tokens = b
        assert C.llama_decode(ctx.ctx, batch) == 0
        last = [argmax(s) for s in range(b)]
    t1 = time.perf_counter()
    C.llama_batch_free(batch)
    ctx.close()
    m.close()
    return b * steps / (t1 - t0), b * (steps + 1) / (t1 - t_start)


def engine_share(model: str, b: int, n: int, threads: int,
                 unified: bool) -> tuple[float, float, int]:
    """Prism's engine alone (no HTTP): B jobs of n tokens at once. Returns the share of wall
    time spent inside llama_decode, the ms a step spent outside it, and the steps taken."""
    import llama_cpp

    from engine.backends.base import Job
    from engine.backends.llama.engine import LlamaEngine
    from engine.chat.request import Sampling

    orig, spent, steps = llama_cpp.llama_decode, [0.0], [0]

    def timed(ctx, batch):
        t = time.perf_counter()
        try:
            return orig(ctx, batch)
        finally:
            spent[0] += time.perf_counter() - t
            steps[0] += 1

    eng = LlamaEngine(model, n_ctx=2048, parallel=b, n_threads=threads, kv_unified=unified)
    eng.ready.wait()
    llama_cpp.llama_decode = timed  # engine/backends/llama/batch.py looks it up at each call
    try:
        done = [threading.Event() for _ in range(b)]
        t0 = time.perf_counter()
        for i in range(b):
            eng.submit(Job(prompt=chatml(f"Story number {i}. {LONG_Q}"), max_tokens=n,
                           sampling=Sampling(temperature=0.0),
                           on_finish=lambda fin, e=done[i]: e.set()))
        for e in done:
            e.wait()
        wall = time.perf_counter() - t0
    finally:
        llama_cpp.llama_decode = orig
        eng.close()
    return spent[0] / wall, (wall - spent[0]) * 1000.0 / max(1, steps[0]), steps[0]


class Server:
    def __init__(self, parallel: int, threads: int, n_ctx: int, kv_layout: str) -> None:
        import subprocess
        import sys

        import openai

        self.parallel = parallel
        port = free_port()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "app", "serve", "--pack", "smollm2", "--port", str(port),
             "--n-ctx", str(n_ctx), "--no-record", "--log-level", "warning",
             "--parallel", str(parallel), "--threads", str(threads),
             "--kv-layout", kv_layout],
            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_http(f"http://127.0.0.1:{port}/health", self.proc)
        self.client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="x",
                                    max_retries=0, timeout=600)

    def stream(self, prompt: str, max_tokens: int, seed: int, times: list[float]) -> None:
        stream = self.client.chat.completions.create(
            model="smollm2", messages=[{"role": "user", "content": prompt}],
            max_tokens=max_tokens, seed=seed, stream=True, temperature=SAMPLING["temperature"],
            top_p=SAMPLING["top_p"], extra_body={
                k: SAMPLING[k] for k in ("top_k", "min_p", "repeat_penalty")})
        for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                times.append(time.perf_counter())

    def close(self) -> None:
        self.client.close()
        self.proc.terminate()
        self.proc.wait(30)


def clients(server: Server, c: int, same: bool, max_tokens: int,
            round_no: int) -> tuple[float, float]:
    """C concurrent streaming clients: (decode tokens/s while all C generate, end-to-end
    tokens/s from the requests to the last token); see the module docstring."""
    all_times: list[list[float]] = [[] for _ in range(c)]
    threads = [threading.Thread(target=server.stream, args=(
        f"Story number {round_no if same else round_no * 100 + i}. {LONG_Q}", max_tokens,
        i, all_times[i])) for i in range(c)]
    t_start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    flat = [t for ts in all_times for t in ts]
    if any(len(ts) < 2 for ts in all_times):
        return 0.0, 0.0
    lo, hi = max(ts[0] for ts in all_times), min(ts[-1] for ts in all_times)
    inside = sum(1 for t in flat if lo < t <= hi)
    decode = inside / (hi - lo) if hi > lo else 0.0
    return decode, len(flat) / (max(flat) - t_start)


def short_ttft(server: Server, round_no: int) -> float:
    """TTFT (ms) of a short request sent once a long one has streamed 8 tokens."""
    long_times: list[float] = []
    t = threading.Thread(target=server.stream, args=(
        f"Story number {round_no}. {LONG_Q}", 160, 1, long_times))
    t.start()
    while len(long_times) < 8:
        time.sleep(0.005)
    short_times: list[float] = []
    t0 = time.perf_counter()
    server.stream(f"Say hello ({round_no}).", 8, 2, short_times)
    t.join()
    return (short_times[0] - t0) * 1000.0


def main(args) -> int:
    """Paired rounds: at each C the bare loop and the HTTP clients run back to back, and the
    ratios are taken per round before the median, so a shared machine's load (which moves by
    2-4x here while other processes run) hits both sides of each ratio alike."""
    import signal
    import sys

    from engine.backends.llama.kv_plan import KVLayout, plan_context, plan_kv
    from engine.chat.packs import resolve_pack

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # so the servers are stopped
    model = str(resolve_pack("smollm2").gguf)
    cs = sorted({int(x) for x in args.concurrency.split(",")})
    threads = args.threads or 1
    runs, n = args.runs, args.max_tokens
    plan = plan_context(model)
    kv = plan_kv(args.n_ctx, max(cs), plan.kv_per_token, plan.budget, KVLayout(args.kv_layout))
    layout = "unified" if kv.unified else "split"
    print(f"model SmolLM2-135M Q4_1, threads {threads}, max_tokens {n}, {runs} rounds, "
          f"concurrency {cs}, KV {layout} ({kv.reason})", flush=True)
    med = statistics.median
    share, outside, steps = engine_share(model, max(cs), n, threads, kv.unified)
    print(f"engine alone, {max(cs)} jobs x {n} tokens: {steps} steps, {share:.1%} of the wall "
          f"time inside llama_decode, {outside:.2f} ms a step outside it", flush=True)
    servers = {p: Server(p, threads, args.n_ctx, layout) for p in sorted({1, 4, max(cs)})}

    def serving(c: int) -> Server:  # the default --parallel 4, or one wide enough for C
        return servers[4] if c <= 4 else servers[max(cs)]

    rows = []

    def ratio(xs, ys, k):
        return med(x[k] / y[k] for x, y in zip(xs, ys, strict=True))

    try:
        for p in {4, max(cs)}:
            clients(servers[p], 1, True, 8, 0)  # warm-up
        for c in cs:
            bare, same, diff = [], [], []
            for r in range(1, runs + 1):
                bare.append(bare_loop(model, c, n, threads, kv.unified))
                same.append(clients(serving(c), c, True, n, r))
                diff.append(clients(serving(c), c, False, n, r))
            row = (c, med(b[0] for b in bare), med(b[1] for b in bare),
                   med(x[0] for x in diff), ratio(same, bare, 0), ratio(diff, bare, 0),
                   med(x[1] for x in diff), ratio(same, bare, 1), ratio(diff, bare, 1))
            rows.append(row)
            print(f"C={c} bare {row[1]:.1f} (e2e {row[2]:.1f})  decode: same {row[4]:.2f}x "
                  f"diff {row[5]:.2f}x  e2e: same {row[7]:.2f}x diff {row[8]:.2f}x", flush=True)
        single, ttft = {1: [], 4: []}, {1: [], 4: []}
        for r in range(1, runs + 1):
            for p in ((1, 4) if r % 2 else (4, 1)):
                single[p].append(clients(servers[p], 1, False, n, r)[0])
                ttft[p].append(short_ttft(servers[p], r))
    finally:
        for s in servers.values():
            s.close()
    b1 = rows[0][1] if rows and rows[0][0] == 1 else float("nan")
    print()
    print(f"{'':3} {'bare (decode)':>16} {'http decode ÷ bare':>20} {'bare e2e':>9} "
          f"{'http e2e ÷ bare e2e':>20}")
    print(f"{'C':>3} {'tok/s':>8} {'x B=1':>7} {'same':>9} {'diff':>10} {'tok/s':>9} "
          f"{'same':>9} {'diff':>10}")
    for c, b, be, _d, rs, rd, _de, res, red in rows:
        print(f"{c:3d} {b:8.1f} {b / b1:7.2f} {rs:9.2f} {rd:10.2f} {be:9.1f} {res:9.2f} "
              f"{red:10.2f}")
    r4 = med(a / b for a, b in zip(single[4], single[1], strict=True))
    print(f"\nsingle stream: --parallel 4 {med(single[4]):.1f} tok/s, --parallel 1 "
          f"{med(single[1]):.1f} tok/s: {r4:.3f}x (paired; target >= 0.97)")
    print(f"short request's TTFT beside a long generation: --parallel 1 {med(ttft[1]):.0f} ms, "
          f"--parallel 4 {med(ttft[4]):.0f} ms (target < 1000 ms)")
    return 0
