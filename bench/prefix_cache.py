"""The disk prompt cache (engine/backends/llama/disk_cache.py, issue 20): time to first token
cold, warm in a slot and after a restart from disk; disk bytes per 1,000 tokens; and what a save
costs the decode speed of a sequence beside it. Prints a table; not part of the test suite.

Runs on the main thread; each engine decodes on its worker thread and writes its saves on the
cache's writer thread. The prompts are real clients' first requests, rendered with the default
pack's template by the server's own code (app/api's converters, then `Service.render`) and
tokenized as the server tokenizes them:

- Open WebUI 0.12.4 with its 37 tools (tests/app/data/client_openwebui.json, a copy of
  ../shared/clients/openwebui_chat_with_tools.json): POST /v1/chat/completions;
- Codex CLI 0.171.0's first request (tests/app/data/client_codex.json): POST /v1/responses,
  converted as the server converts it (its namespace and web_search tools have no local
  implementation and are left out, as they are when served).

For each prompt, each cold round: a new `LlamaEngine` on a fresh cache folder prefills it
(cold), then gets it again (warm: the slot holds it), and is closed; then new engines on the
same folder get it again (from disk: the page cache still holds the file, as after a restart of
the server; and with the file's pages dropped first, `posix_fadvise(DONTNEED)`, as after a
reboot). Disk bytes per 1,000 tokens: the saved file's size over the tokens it holds.

The neighbour: a sequence generating 200 tokens (greedy) while another request, Open WebUI's
tools prompt behind a new ~1,000-token message, ends beside it after 16 tokens, and its whole
sequence (~8,100 tokens) is saved: snapshotted on the engine thread once nothing decodes beside
it any more (engine/backends/llama/reuse.py `persist`; before that change, at once, while the
neighbour decoded) and written by the writer thread. The same with an engine without the disk
cache, alternating which goes first each round; the neighbour's decode tokens/s (its first
token to its last) and its longest gap between two tokens. Both requests' prompts are in their
slots already (a warm-up round), so the only difference is the save.

Greedy, `--threads` llama threads (default 1: on the 2-core dev box two threads collapse when
other processes compete, engine/backends/llama/engine.py), `--parallel 2` split KV caches of
`--n-ctx` 8192 (the default model's trained context). The cache's own steps are timed by
wrapping them (`install_probes`): a load's read and digest against its copy into the context,
a save's snapshot against its write. Rounds are few because a cold prefill of 7,000 tokens
takes about three minutes on the 2-core dev box at a load of 5 (one cold round a prompt by
default; a cold TTFT is a long prefill and varies little beside a target of 10%): the default
run takes ~17 minutes there, `--quick` (Open WebUI's prompt only, fewer rounds) ~11, and
`--part ttft` or `--part neighbour` runs one half (the neighbour alone prefills its prompt in
both engines first).

    python bench/prefix_cache.py [--quick] [--part all|ttft|neighbour] [--cold-rounds 1]
                                 [--warm-rounds 3] [--disk-rounds 4] [--neighbour-rounds 4]
                                 [--threads 1] [--n-ctx 8192] [--cache-dir DIR]
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import itertools
import json
import os
import random
import statistics
import struct
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from app.api import openai as chat_api
from app.api import responses as responses_api
from app.api.convert import validate
from bench.common import ROOT
from engine.backends.base import Finish, Job
from engine.backends.llama.disk_cache import MAGIC, SUFFIX, DiskCache
from engine.backends.llama.engine import LlamaEngine
from engine.backends.llama.reuse import DiskReuse
from engine.backends.llama.vocab import Vocab
from engine.chat.detect import preserved_tokens
from engine.chat.packs import resolve_pack
from engine.chat.request import ChatRequest, Message, Sampling
from engine.service import Service

DATA = ROOT / "tests" / "app" / "data"
GREEDY = Sampling(temperature=0.0)
N_PARALLEL = 2
TTFT_MAX_TOKENS = 8
B_MAX_TOKENS = 16  # the request that ends beside the neighbour, and is saved
A_MAX_TOKENS = 200  # the neighbour
# Greedy, it writes well past 200 tokens; short, so prompt + 200 tokens stay under SAVE_MIN
# (the neighbour is never saved itself).
A_PROMPT = ("<|im_start|>user\nWrite the numbers from 1 to 300, separated by commas.<|im_end|>\n"
            "<|im_start|>assistant\n")
NEW_SHARE = 0.12  # the saved request's new message: above the cache's 10% for a save


@dataclass
class Case:
    name: str
    request: ChatRequest | None
    prompt: str
    ids: tuple[int, ...]


def load_cases(svc: Service, vocab: Vocab) -> list[Case]:
    """The two captured requests as the server would render and tokenize them."""
    owui = json.loads((DATA / "client_openwebui.json").read_text(encoding="utf-8"))["body"]
    codex = json.loads((DATA / "client_codex.json").read_text(encoding="utf-8"))["body"]
    reqs = [("Open WebUI, 37 tools", chat_api.to_chat_request(validate(chat_api.ChatBody, owui))),
            ("Codex, first request",
             responses_api.to_chat_request(validate(responses_api.ResponsesBody, codex))[0])]
    cases = []
    for name, req in reqs:
        prompt = svc.render(req)
        cases.append(Case(name, req, prompt, tuple(vocab.tokenize(prompt))))
    return cases


def with_message(svc: Service, vocab: Vocab, case: Case, seed: int, n_ctx: int) -> Case:
    """`case` with its last user message replaced by a new one of about NEW_SHARE of the
    prompt (so its sequence is worth a save), different every seed, the whole still fitting
    the context with room for B_MAX_TOKENS."""
    assert case.request is not None
    rng = random.Random(seed)
    words = ["cache", "token", "prefix", "slot", "disk", "save", "load", "model", "agent",
             "tool", "state", "file", "entry", "round", "chunk", "batch", "layer", "write"]
    target = int(len(case.ids) * NEW_SHARE / (1 - NEW_SHARE))
    room = n_ctx - len(case.ids) - B_MAX_TOKENS - 16
    if target > room:
        raise SystemExit(f"{case.name}: {len(case.ids)} tokens leave {room} for a new "
                         f"message of {target}; use a larger --n-ctx")
    items = [f"{rng.choice(words)}-{rng.randrange(1000)}" for _ in range(2 * target)]

    def build(k: int) -> Case:
        text = f"Note {seed}: " + " ".join(items[:k])
        msgs = (*case.request.messages[:-1], Message(role="user", content=text))
        req = dataclasses.replace(case.request, messages=msgs)
        prompt = svc.render(req)
        return Case(f"{case.name} + note {seed}", req, prompt, tuple(vocab.tokenize(prompt)))

    lo, hi = 1, len(items)  # the fewest items that reach the target: a dozen renders
    while lo < hi:
        mid = (lo + hi) // 2
        if len(build(mid).ids) - len(case.ids) >= target:
            hi = mid
        else:
            lo = mid + 1
    return build(lo)


# -- the cache's own steps, timed -------------------------------------------------------------

STEPS: dict[str, list[float]] = {}  # step -> ms, one per call that did the work


def _timed(cls: type, name: str, step: str, did: Callable[[tuple, object], bool]) -> None:
    """Wrap `cls.name` to time it. A bench may patch what it measures; the engine never
    does. `did(args, result)`: whether the call did the work (a load that loaded)."""
    orig = getattr(cls, name)

    @functools.wraps(orig)
    def timed(*a, **kw):
        t0 = time.perf_counter()
        r = orig(*a, **kw)
        if did(a, r):
            t1 = time.perf_counter()
            STEPS.setdefault(step, []).append((t1 - t0) * 1000)
            SPANS.append((t0, t1))
        return r

    setattr(cls, name, timed)


SPANS: list[tuple[float, float]] = []  # (start, end) of each timed step, perf_counter seconds


def overlap_ms(lo: float, hi: float) -> float:
    """How long the timed snapshots and writes ran inside [lo, hi]."""
    return 1000 * sum(max(0.0, min(b, hi) - max(a, lo)) for a, b in SPANS)


def install_probes() -> None:
    _timed(DiskReuse, "load", "load", lambda a, r: r != a[4])  # (self, slot, prompt, best, keep)
    _timed(DiskCache, "read", "read", lambda a, r: r is not None)
    _timed(DiskReuse, "save", "snapshot", lambda a, r: bool(r))
    _timed(DiskCache, "_write", "write", lambda a, r: True)  # private: the writer's whole job


def steps_line(steps: dict[str, list[float]], what: str) -> str:
    def m(k: str) -> float:
        return statistics.median(steps[k]) if steps.get(k) else float("nan")

    if what == "load":
        return (f"load {m('load'):.0f} ms (engine thread) = read and digest {m('read'):.0f} ms"
                f" + into the context and cut {m('load') - m('read'):.0f} ms")
    return (f"snapshot {m('snapshot'):.0f} ms (engine thread: the other sequences wait), "
            f"write {m('write'):.0f} ms (writer thread)")


# -- engines and jobs ----------------------------------------------------------------------------


def open_engine(path: Path, args: argparse.Namespace, cache_dir: Path | None,
                preserved: tuple[str, ...]) -> LlamaEngine:
    eng = LlamaEngine(path, n_ctx=args.n_ctx, parallel=N_PARALLEL, n_threads=args.threads,
                      kv_unified=False, preserved=preserved, cache_dir=cache_dir)
    eng.ready.wait(300)
    if eng.load_error:
        raise SystemExit(f"the engine did not load: {eng.load_error}")
    return eng


def ask(eng: LlamaEngine, case: Case, max_tokens: int = TTFT_MAX_TOKENS) -> Finish:
    done = threading.Event()
    out: list[Finish] = []
    job = Job(prompt=case.prompt, prompt_ids=case.ids, max_tokens=max_tokens, sampling=GREEDY,
              on_finish=lambda f: (out.append(f), done.set()))
    eng.submit(job)
    if not done.wait(1200) or out[0].reason == "error":
        raise SystemExit(f"{case.name}: {out[0].error if out else 'no answer in 20 min'}")
    return out[0]


def kv_files(root: Path) -> list[Path]:
    return sorted(root.glob(f"ns-*/*{SUFFIX}"))


def wait_saved(root: Path, before: set[Path], timeout: float = 120.0) -> None:
    """Until the writer thread has renamed a file not in `before` into place (a save is
    atomic: the file appears whole)."""
    deadline = time.monotonic() + timeout
    while not set(kv_files(root)) - before:
        if time.monotonic() > deadline:
            raise SystemExit(f"{root}: no new saved file after {timeout:.0f} s")
        time.sleep(0.02)


def file_tokens(p: Path) -> int:
    """The token count in a saved file's header (format: engine/backends/llama/disk_cache.py)."""
    with p.open("rb") as f:
        head = f.read(12)
        assert head[:8] == MAGIC, p
        (hlen,) = struct.unpack("<I", head[8:])
        return int(json.loads(f.read(hlen))["n_tokens"])


def drop_page_cache(root: Path) -> bool:
    """Drop the saved files' pages from the page cache (written back first), as a reboot
    would; only these files' pages, nothing else on the machine. False where it cannot."""
    if not hasattr(os, "posix_fadvise"):
        return False
    for p in kv_files(root):
        fd = os.open(p, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
    return True


# -- the measures --------------------------------------------------------------------------------


@dataclass
class Ttft:
    cold: list[float]
    warm: list[float]
    disk_hot: list[float]
    disk_dropped: list[float]
    bytes_per_1k: list[float]
    sources: dict[str, tuple[int, int, int]]  # (slot, disk, computed) prompt tokens, last run
    steps: dict[str, dict[str, list[float]]]  # kind of restart -> STEPS of its loads


def measure_ttft(case: Case, path: Path, args: argparse.Namespace, root: Path,
                 preserved: tuple[str, ...]) -> tuple[Ttft, Path]:
    m = Ttft([], [], [], [], [], {}, {})

    def note(kind: str, f: Finish) -> float:
        t = f.timings
        m.sources[kind] = (t.slot_tokens, t.disk_tokens, t.computed_tokens)
        return t.ttft_ms

    folder = root
    for r in range(args.cold_rounds):
        folder = root / f"{case.name.split(',')[0].replace(' ', '-').lower()}-{r}"
        eng = open_engine(path, args, folder, preserved)
        try:
            m.cold.append(note("cold", ask(eng, case)))
            wait_saved(folder, set())  # the save has landed: the warm runs do not race it
            for _ in range(args.warm_rounds):
                m.warm.append(note("warm (slot)", ask(eng, case)))
        finally:
            eng.close(60)
        saved = kv_files(folder)
        m.bytes_per_1k += [p.stat().st_size / file_tokens(p) * 1000 for p in saved]
        for i in range(args.disk_rounds):
            dropped = i % 2 == 1 and drop_page_cache(folder)  # alternate: page cache / device
            eng = open_engine(path, args, folder, preserved)
            STEPS.clear()
            try:
                f = ask(eng, case)
            finally:
                eng.close(60)
            kind = "disk, pages dropped" if dropped else "disk, page cache"
            for k, v in STEPS.items():
                m.steps.setdefault(kind, {}).setdefault(k, []).extend(v)
            (m.disk_dropped if dropped else m.disk_hot).append(note(kind, f))
            if f.timings.disk_tokens == 0:
                raise SystemExit(f"{case.name}: the restart did not load from disk")
    return m, folder


@dataclass
class Neighbour:
    tps: float  # the neighbour's decode tokens/s
    gap_ms: float  # its longest gap between two tokens
    n_tokens: int
    saved: bool
    overlap_ms: float  # of the save's snapshot and write, the part inside the neighbour's decode


def neighbour_round(eng: LlamaEngine, b: Case, a: Case, folder: Path | None) -> Neighbour:
    """`b` (long, ends after B_MAX_TOKENS and is saved) with `a` (the neighbour) beside it."""
    before = set(kv_files(folder)) if folder else set()
    b_first, b_done, a_done = threading.Event(), threading.Event(), threading.Event()
    a_t: list[float] = []
    fins: list[Finish] = []

    def b_finish(f: Finish) -> None:
        fins.append(f)
        b_done.set()
        b_first.set()  # an error ends it before any token: do not wait for one

    eng.submit(Job(prompt=b.prompt, prompt_ids=b.ids, max_tokens=B_MAX_TOKENS, sampling=GREEDY,
                   on_token=lambda t: b_first.set(), on_finish=b_finish))
    if not b_first.wait(1200):
        raise SystemExit("the long request did not start in 20 min")
    if fins and fins[0].reason != "length":
        raise SystemExit(f"the long request ended before the neighbour began: "
                         f"{fins[0].reason} {fins[0].error or ''}")
    eng.submit(Job(prompt=a.prompt, prompt_ids=a.ids, max_tokens=A_MAX_TOKENS, sampling=GREEDY,
                   on_token=lambda t: a_t.append(t.t),
                   on_finish=lambda f: (fins.append(f), a_done.set())))
    if not (a_done.wait(600) and b_done.wait(600)):
        raise SystemExit("the neighbour did not finish")
    if any(f.reason == "error" for f in fins):
        raise SystemExit(f"a request failed: {[f.error for f in fins]}")
    saved = False
    if folder is not None:
        wait_saved(folder, before)  # the next round must not race this save
        saved = True
    # Over the whole decode: the snapshot runs in the other request's end, before its
    # on_finish; the stretch decoded beside it is the same with the cache and without.
    gaps = [y - x for x, y in itertools.pairwise(a_t)]
    tps = (len(a_t) - 1) / (a_t[-1] - a_t[0]) if len(a_t) > 1 else 0.0
    inside = overlap_ms(a_t[0], a_t[-1]) if len(a_t) > 1 else 0.0
    return Neighbour(tps, max(gaps, default=0.0) * 1000, len(a_t), saved, inside)


def measure_neighbour(path: Path, args: argparse.Namespace, folder: Path, svc: Service,
                      vocab: Vocab, case: Case, preserved: tuple[str, ...]):
    a = Case("neighbour", None, A_PROMPT, tuple(vocab.tokenize(A_PROMPT)))
    with_disk = open_engine(path, args, folder, preserved)
    plain = open_engine(path, args, None, preserved)
    res: dict[str, list[Neighbour]] = {"disk cache": [], "no disk cache": []}
    try:
        engines = [("disk cache", with_disk, folder), ("no disk cache", plain, None)]
        # Warm-up, not counted: both slots of both engines hold their prompts' prefixes.
        for _, eng, f in engines:
            neighbour_round(eng, with_message(svc, vocab, case, 0, args.n_ctx), a, f)
        STEPS.clear()
        for r in range(1, args.neighbour_rounds + 1):
            b = with_message(svc, vocab, case, r, args.n_ctx)
            for name, eng, f in engines if r % 2 else engines[::-1]:
                res[name].append(neighbour_round(eng, b, a, f))
    finally:
        with_disk.close(60)
        plain.close(60)
    return res, len(b.ids), dict(STEPS)


# -- the table -----------------------------------------------------------------------------------


def ms(xs: list[float]) -> str:
    if not xs:
        return "-"
    med = statistics.median(xs)
    return f"{med / 1000:.1f} s" if med >= 10_000 else f"{med:.0f} ms"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true",
                    help="Open WebUI's prompt only, 2 warm, 2 disk and 2 neighbour rounds")
    ap.add_argument("--cold-rounds", type=int, default=1,
                    help="cold prefills of each prompt (each ~3 min at load 5 here)")
    ap.add_argument("--warm-rounds", type=int, default=3)
    ap.add_argument("--disk-rounds", type=int, default=4,
                    help="restarts after each cold round, alternating page cache / dropped")
    ap.add_argument("--neighbour-rounds", type=int, default=4)
    ap.add_argument("--part", choices=["all", "ttft", "neighbour"], default="all",
                    help="measure only the first token times or only the neighbour")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--n-ctx", type=int, default=8192)
    ap.add_argument("--cache-dir", type=Path, default=None,
                    help="where the saved files go (default: a temporary folder, removed)")
    args = ap.parse_args()
    if args.quick:
        args.cold_rounds, args.warm_rounds, args.disk_rounds, args.neighbour_rounds = 1, 2, 2, 2
    pack = resolve_pack(None)
    path = pack.gguf
    preserved = tuple(preserved_tokens(pack.family))
    vocab = Vocab(path, preserved=preserved)
    # Service.render needs nothing of an engine: the vocabulary stands in for it here.
    svc = Service(vocab, pack)  # type: ignore[arg-type]
    cases = load_cases(svc, vocab)[:1 if args.quick else None]
    install_probes()
    load0 = os.getloadavg()
    t0 = time.perf_counter()
    print(f"model {path.name}, pack {pack.name}, {args.threads} llama thread(s), "
          f"--parallel {N_PARALLEL} split KV caches of {args.n_ctx}; load average "
          f"{load0[0]:.1f} at start; greedy, {TTFT_MAX_TOKENS} tokens a request")
    with tempfile.TemporaryDirectory(prefix="prism-bench-kv-") as tmp:
        root = args.cache_dir or Path(tmp)
        results, folder = [], root / "neighbour"
        for case in cases if args.part != "neighbour" else ():
            print(f"  {case.name}: {len(case.ids)} prompt tokens ...", flush=True)
            m, f = measure_ttft(case, path, args, root, preserved)
            results.append((case, m))
            folder = f if case is cases[0] else folder
        if args.part != "ttft":
            print("  the neighbour ...", flush=True)
            nb = measure_neighbour(path, args, folder, svc, vocab, cases[0], preserved)
    load1 = os.getloadavg()
    if results:
        print_ttft(results, args)
    if args.part != "ttft":
        print_neighbour(*nb)
    print(f"\nwall {time.perf_counter() - t0:.0f} s; load average {load1[0]:.1f} at the end "
          f"(this machine has {os.cpu_count()} cores and is shared)")
    vocab.close()


def print_ttft(results: list[tuple[Case, Ttft]], args: argparse.Namespace) -> None:
    med = statistics.median
    print()
    print(f"{'prompt':24} {'tokens':>6} {'cold':>8} {'warm (slot)':>11} {'disk, cached':>13} "
          f"{'disk, dropped':>13} {'disk/cold':>9} {'bytes/1k tok':>12}")
    for case, m in results:
        disk = m.disk_dropped or m.disk_hot
        ratio = med(disk) / med(m.cold) if disk and m.cold else float("nan")
        print(f"{case.name:24} {len(case.ids):>6} {ms(m.cold):>8} {ms(m.warm):>11} "
              f"{ms(m.disk_hot):>13} {ms(m.disk_dropped):>13} {ratio:>8.1%} "
              f"{med(m.bytes_per_1k) / 2**20:>8.1f} MiB")
    print(f"  (rounds: cold {args.cold_rounds}, warm {args.warm_rounds}, from disk "
          f"{args.disk_rounds} a cold round; 'disk, dropped': the file's pages dropped from "
          "the page cache first)")
    for case, m in results:
        src = ", ".join(f"{k}: slot {s} / disk {d} / computed {c}"
                        for k, (s, d, c) in m.sources.items())
        print(f"  prompt tokens by source, {case.name}: {src}")
    for case, m in results:
        for kind, steps in m.steps.items():
            print(f"  {case.name}, {kind}: {steps_line(steps, 'load')}")


def print_neighbour(nb: dict[str, list[Neighbour]], n_b: int,
                    steps: dict[str, list[float]]) -> None:
    med = statistics.median
    print()
    d, p = nb["disk cache"], nb["no disk cache"]
    ratios = [x.tps / y.tps for x, y in zip(d, p, strict=True)]
    print(f"neighbour ({A_MAX_TOKENS} tokens, greedy) beside a {n_b}-token request that ends "
          f"after {B_MAX_TOKENS} tokens, {len(d)} alternating rounds, medians:")
    for name, xs in nb.items():
        print(f"  {name:14} {med(x.tps for x in xs):6.1f} tokens/s, longest gap between two "
              f"tokens {med(x.gap_ms for x in xs):5.0f} ms, {med(x.n_tokens for x in xs):.0f}"
              f" tokens{', the other saved every round' if all(x.saved for x in xs) else ''}")
    print(f"  disk cache / none: {med(ratios):.3f}x (median of per-round ratios: "
          f"{', '.join(f'{r:.3f}' for r in ratios)}); the save's cost: {1 - med(ratios):+.1%}")
    print(f"  each save: {steps_line(steps, 'save')}; of it inside the neighbour's decode: "
          f"{', '.join(f'{x.overlap_ms:.0f}' for x in d)} ms")


if __name__ == "__main__":
    main()
