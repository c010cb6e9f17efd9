"""Several models from the command line: `--models-dir`, several `--model`, `--models-preset`.

Owns `build_catalog(args)`: the models (engine/catalog_files.py), each one's memory plan
(engine/backends/llama/kv_plan.py: weights + KV cache + buffers, the figure eviction weighs),
and the function the catalog's loader thread calls to make a model's `Service` exactly as a
single model's is made (app/config.py: the pack from the GGUF's template or the preset's pack
or template, the context, the KV layout, the disk prompt cache, whose namespace is per model
file so a model that comes back finds its prefixes), with the preset's settings over the
command line's. Before a model is loaded (and before anything is evicted for it) its file
passes `check_file` (app/preflight.py: a GGUF cut short is `failed` without costing a resident
model its place). One recording for the whole server, which also records each load, unload
and eviction (a `model` record: engine/record/recording.py). Runs on the main thread at
start-up; the build and check functions and the recording of model events run on the
catalog's loader thread.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
from pathlib import Path

from app import telemetry
from app.config import context_size, disk_cache_dir, resolve
from app.embed import embedder_for
from app.preflight import check_model
from engine.backends.llama.kv_plan import KVLayout, memory_bytes, plan_context, plan_kv
from engine.catalog import BUFFERS, Catalog, CatalogEvent
from engine.catalog_files import CatalogError, ModelSpec, specs_for
from engine.chat.detect import preserved_tokens
from engine.metrics import Metrics
from engine.record.model_info import LOCAL
from engine.record.recording import Recorder
from engine.service import Service

log = logging.getLogger("prism")
MEMORY_SHARE = 2  # by default the resident models may take half of the machine's memory


def model_args(args: argparse.Namespace, spec: ModelSpec) -> argparse.Namespace:
    """The command line as one model of the catalog sees it: its file, its preset's settings
    over the flags. A `--pack` on the command line is not every model's template: only a
    preset's `pack` gives one."""
    o = spec.options
    out = argparse.Namespace(**vars(args))
    out.model, out.models, out.pack = str(spec.path), [str(spec.path)], o.pack
    out.template = Path(o.template) if o.template else None
    out.family = o.family or args.family
    out.n_ctx = o.n_ctx or args.n_ctx
    out.parallel = o.parallel or args.parallel
    out.threads = o.threads or args.threads
    out.flash_attn = o.flash_attn or args.flash_attn
    out.replay = None
    return out


def estimate(args: argparse.Namespace, spec: ModelSpec) -> tuple[int, int]:
    """(bytes, n_ctx) the model will take, planned from its GGUF's metadata."""
    a = model_args(args, spec)
    plan = plan_context(spec.path)
    n_ctx = a.n_ctx or plan.n_ctx
    kv = plan_kv(n_ctx, a.parallel, plan.kv_per_token, plan.budget, KVLayout(a.kv_layout))
    return spec.size + (kv.total or 0) + BUFFERS, n_ctx


def build_model(args: argparse.Namespace, spec: ModelSpec, recorder: Recorder | None) -> Service:
    """One model's service (on the catalog's loader thread). A file that cannot be used
    raises (SystemExit from the preflight, or the engine's error): the model is `failed`."""
    from engine.backends.llama.engine import LlamaEngine

    a = model_args(args, spec)
    pack = resolve(a)
    n_ctx, kv_unified = context_size(a, pack)
    engine = LlamaEngine(pack.gguf, n_ctx=n_ctx, kv_unified=kv_unified,
                         n_gpu_layers=a.n_gpu_layers, n_threads=a.threads, parallel=a.parallel,
                         preserved=preserved_tokens(pack.family),
                         cache_dir=disk_cache_dir(a), cache_size=a.cache_size,
                         speculate=a.speculate == "ngram", flash_attn=a.flash_attn)
    service = Service(engine, pack, metrics=Metrics(engine), recorder=recorder)
    service.escape_special = a.escape_special
    service.guard_calls = not a.no_guard_calls
    service.reasoning_budget = a.reasoning_budget  # engine/chat/budget.py
    service.embedder = embedder_for(a, engine)  # /v1/embeddings (app/embed.py); closed on unload
    return service


def check_file(spec: ModelSpec) -> None:
    """SystemExit naming the file when a part of the model is not a whole GGUF."""
    for part in spec.parts or (spec.path,):
        check_model(part)


def record_events(recorder: Recorder):
    """A catalog listener writing each model event to the recording (loader thread)."""
    def listen(ev: CatalogEvent) -> None:
        # The recording closes after the catalog; a late event is not worth a traceback.
        with contextlib.suppress(ValueError):
            recorder.model_event(ev.kind, ev.model, reason=ev.reason, error=ev.status.error,
                                 memory=ev.status.memory)
    return listen


def build_catalog(args: argparse.Namespace) -> tuple[Catalog, Recorder | None]:
    """The catalog the arguments describe, its loader started (nothing loaded yet), and the
    recording every model's requests go to. A folder or preset that cannot be used stops
    start-up in one line."""
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if getattr(args, "upstream", None) or args.replay:
        raise SystemExit("prism: --models-dir and several --model serve local models; they "
                         "do not combine with --upstream or --replay")
    try:
        specs = specs_for(args.models_dir, [Path(f).expanduser() for f in args.models],
                          args.models_preset)
    except CatalogError as e:
        raise SystemExit(f"prism: {e}") from None
    recorder = None
    if not args.no_record:
        recorder = Recorder(args.record_to, model=", ".join(s.id for s in specs),
                            pack="catalog", info={"engine": LOCAL})
    max_memory = args.models_max_memory or memory_bytes() // MEMORY_SHARE
    catalog = Catalog(specs, lambda spec: build_model(args, spec, recorder),
                      lambda spec: estimate(args, spec), max_memory=max_memory,
                      max_models=args.models_max, check=check_file)
    if recorder is not None:
        catalog.add_listener(record_events(recorder))
    # --otlp-endpoint: every model's requests as spans, from before the first (pinned) load
    telemetry.start_catalog(args, catalog)
    for spec in specs:
        if spec.pin:  # a pinned model is resident from the start, as it will stay
            catalog.load(spec.id)
    log.info("[prism] %d models: %s (memory limit %.1f GiB%s)", len(specs),
             ", ".join(s.id for s in specs), max_memory / 2**30,
             f", at most {args.models_max} resident" if args.models_max else "")
    return catalog, recorder
