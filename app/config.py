"""Engine options shared by the `gui` and `serve` verbs, and the wiring they imply.

Owns `add_engine_arguments()` and `build_service()`: which pack (built-in name, directory, or
`--model FILE.gguf`, its template replaced by `--template FILE`: `with_template`), which engine
(llama.cpp or replay), and the metrics and recorder that every request goes through. A model
file or template that cannot be used stops start-up in one line (app/preflight.py). Runs on
the main thread at start-up.
"""

from __future__ import annotations

import argparse
import logging
import sys
from dataclasses import replace
from pathlib import Path

from app import embed, telemetry, upstream
from app.preflight import check_model, check_renders, check_template
from engine.backends.llama.kv_plan import KVLayout, plan_context, plan_kv
from engine.chat.detect import preserved_tokens
from engine.chat.packs import Pack, PackError, pack_from_template, resolve_pack
from engine.metrics import Metrics
from engine.parse import families
from engine.record.model_info import LOCAL, REPLAY, describe
from engine.record.recording import Recorder
from engine.service import Service

DEFAULT_PACK = "smollm2"
REPLAY_PACK = "qwen3-xml"  # plain-text replays start in reasoning, as a Qwen3 server would
DEFAULT_PARALLEL = 4  # requests decoded at once: Open WebUI's chat, title and follow-ups


def add_engine_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--pack", help="a built-in pack name (smollm2, gemma3-270m, qwen3-xml, "
                   "qwen3-hermes) or a pack directory (a GGUF plus tokenizer/chat_template.jinja)")
    p.add_argument("--model", action=ModelFiles, help="a GGUF file; its chat template comes "
                   "from its metadata (or from --pack when both are given). Repeatable: "
                   "several serve them all, loaded on demand (as --models-dir)")
    p.set_defaults(models=[])
    p.add_argument("--models-dir", type=Path, default=None, metavar="DIR",
                   help="serve every *.gguf in DIR and its subfolders (one level; a "
                   "multi-part GGUF is one model), each loaded when a request names it")
    p.add_argument("--models-preset", type=Path, default=None, metavar="FILE",
                   help="per-model settings (TOML, one table per model: alias, aliases, "
                   "n_ctx, parallel, threads, pack, template, family, flash_attn, pin, ttl); "
                   "the command line's flags are the defaults")
    p.add_argument("--models-max-memory", type=byte_size, default=None, metavar="SIZE",
                   help="the most memory the resident models may take together by their "
                   "memory plan (weights, KV cache, buffers), least recently used unloaded "
                   "first (default: half this machine's memory)")
    p.add_argument("--models-max", type=_at_least_one, default=None, metavar="N",
                   help="the most models resident at once (default: as many as fit)")
    p.add_argument("--load-timeout", type=float, default=300.0, metavar="SECONDS",
                   help="how long a request waits for its model to load before a 503 with "
                   "Retry-After (default 300)")
    p.add_argument("--family", choices=families.NAMES, help="the model family to parse "
                   "(default: the pack's, or the family detected from the GGUF's chat template)")
    # The flag's name before the concept was called a family; kept so scripts keep working.
    p.add_argument("--dialect", dest="family", choices=families.NAMES,
                   default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    p.add_argument("--replay", nargs="+", metavar="FILE", help="serve recorded sessions or "
                   "plain-text model outputs instead of a model (a recorded request answers the "
                   "request with its conversation; plain text goes to each request in turn)")
    p.add_argument("--replay-tools-only", action="store_true", help="plain-text replay outputs "
                   "go only to requests that declare tools (not, say, Open WebUI's title "
                   "requests)")
    p.add_argument("--replay-strict-order", action="store_true", help="hand plain-text replay "
                   "outputs out strictly in order (default: one that holds a tool call waits "
                   "for the next request that declares tools)")
    p.add_argument("--replay-speed", type=float, default=0.0,
                   help="replay pace: 0 instant (default), 1 as recorded, N for N× faster")
    p.add_argument("--n-ctx", type=int, default=None,
                   help="context length (default: the model's trained context, capped so its KV "
                   "cache takes at most a quarter of this machine's memory)")
    p.add_argument("--max-tokens", type=_at_least_one, default=None, metavar="N",
                   help="the most tokens one reply may generate, and the default for requests "
                   "that set none (default: what remains of the context)")
    p.add_argument("--threads", type=int, default=None,
                   help="CPU threads for llama.cpp (default: half the cores to decode, all of "
                   "them for the prompt)")
    p.add_argument("--parallel", type=_at_least_one, default=DEFAULT_PARALLEL, metavar="N",
                   help="requests decoded at once in one batch (default 4; 1 serves one at a "
                   "time)")
    p.add_argument("--kv-layout", choices=[k.value for k in KVLayout], default="auto",
                   help="how the parallel sequences hold their KV cache: split (one cache of "
                   "the whole context per sequence: fastest, N times the memory), unified (one "
                   "pool of the context shared by them: the memory of one, slower as it fills), "
                   "auto (default: split when the N caches fit a quarter of the memory)")
    p.add_argument("--n-gpu-layers", type=int, default=0,
                   help="layers to offload to Metal/CUDA when llama-cpp-python was built for it")
    p.add_argument("--cache-dir", type=Path, default=None,
                   help="folder of the disk prompt cache: KV prefixes kept across restarts "
                   "(default: the user's cache folder, prism/kv)")
    p.add_argument("--cache-size", type=byte_size, default=None, metavar="SIZE",
                   help="the most the disk prompt cache may hold, least recently used going "
                   "first: bytes or 512M, 4G (default 4G; 0 turns it off, as --no-disk-cache)")
    p.add_argument("--no-disk-cache", action="store_true",
                   help="do not save or load KV prefixes on disk")
    p.add_argument("--flash-attn", choices=("auto", "on", "off"), default="auto",
                   help="llama.cpp's flash attention: auto (default, as llama-server: on where "
                   "the backend runs it for the model), on, off (as llama-cpp-python's Llama)")
    p.add_argument("--speculate", choices=("ngram", "off"), default="off",
                   help="draftless speculative decoding: draft tokens looked up in the prompt "
                   "and the reply so far, verified in the same step (ngram); off (default)")
    p.add_argument("--no-guard-calls", action="store_true",
                   help="let calls under tool_choice auto sample freely: by default, once the "
                   "model opens a real call the rest follows the tool's schema")
    p.add_argument("--reasoning-budget", type=int, default=None, metavar="N",
                   help="the most tokens a reply's reasoning may hold before Prism closes it "
                   "with the family's own close and the answer follows (0: no reasoning; "
                   "default: no budget); a request's reasoning_budget, reasoning_effort or "
                   "thinking.budget_tokens overrides it")
    p.add_argument("--no-record", action="store_true", help="do not record requests")
    p.add_argument("--escape-special", action="store_true",
                   help="tokenize message content as plain text, so a special token a user "
                   "types (<|im_start|>...) is not read as a control token")
    p.add_argument("--record-to", type=Path, help="session file (default: the user data dir)")
    upstream.add_arguments(p)
    embed.add_arguments(p)  # --no-embeddings, --embed-ctx
    telemetry.add_arguments(p)  # --otlp-endpoint, --otlp-content


class ModelFiles(argparse.Action):
    """--model, repeatable: `models` lists every file, `model` keeps the first (what a
    single-model start reads, unchanged)."""

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        namespace.models = [*getattr(namespace, "models", []), values]
        if len(namespace.models) == 1:
            namespace.model = values


def uses_catalog(args: argparse.Namespace) -> bool:
    """Several models: --models-dir, --models-preset or more than one --model."""
    return bool(getattr(args, "models_dir", None) or getattr(args, "models_preset", None)
                or len(getattr(args, "models", None) or ()) > 1)


def port_number(text: str) -> int:
    """--port: 0 (any free port) to 65535, or a one-line usage error (not a traceback)."""
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 0 <= n <= 65535:
        raise argparse.ArgumentTypeError(f"a port is 0 to 65535, not {n}")
    return n


def byte_size(text: str) -> int:
    """--cache-size: 4G, 512M, 1.5GiB, 100000 (bytes)."""
    t = text.strip().upper().removesuffix("IB").removesuffix("B")
    mult = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}.get(t[-1:], 1)
    try:
        n = float(t[:-1] if mult > 1 else t) * mult
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (say 4G or 512M)") from None
    if n < 0:
        raise argparse.ArgumentTypeError(f"a size is not negative: {text!r}")
    return int(n)


def disk_cache_dir(args: argparse.Namespace) -> Path | None:
    """Where the disk prompt cache lives, or None when it is off (--no-disk-cache, or a
    --cache-size of 0: room for nothing, not the default size)."""
    if getattr(args, "no_disk_cache", False) or getattr(args, "cache_size", None) == 0:
        return None
    if args.cache_dir is not None:
        return args.cache_dir
    import platformdirs

    return Path(platformdirs.user_cache_dir("prism")) / "kv"


def _at_least_one(text: str) -> int:
    n = int(text)
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {n}")
    return n


def context_size(args: argparse.Namespace, pack: Pack) -> tuple[int, bool]:
    """The context one request gets (--n-ctx, else the pack folder's pack.toml n_ctx, else the
    model's trained context within the memory budget) and whether the sequences share one KV
    pool (engine/backends/llama/kv_plan.py, plan_kv); both said on stderr."""
    plan = plan_context(pack.gguf)
    n_ctx = args.n_ctx or pack.n_ctx
    if n_ctx:
        why = "--n-ctx" if args.n_ctx else f"pack {pack.name}"
        print(f"prism: context {n_ctx} tokens ({why})", file=sys.stderr, flush=True)
    else:
        n_ctx = plan.n_ctx
        print(f"prism: {plan.describe()}", file=sys.stderr, flush=True)
    kv = plan_kv(n_ctx, args.parallel, plan.kv_per_token, plan.budget, KVLayout(args.kv_layout))
    if args.parallel > 1:
        what = ("one KV pool shared by the sequences" if kv.unified
                else "one KV cache per sequence")
        print(f"prism: {args.parallel} parallel sequences, {what}: {kv.reason}",
              file=sys.stderr, flush=True)
    return n_ctx, kv.unified


def resolve(args: argparse.Namespace):
    """The pack these arguments name; replays need only its template. `--template FILE`
    replaces the pack's template; a model file that is cut short stops here, named."""
    name = args.pack or (REPLAY_PACK if args.replay and not args.model else None)
    try:
        pack = resolve_pack(name, args.model, require_model=not args.replay,
                            family=args.family)
    except PackError as e:
        raise SystemExit(f"prism: {e}") from None
    if getattr(args, "template", None) is not None:
        pack = with_template(pack, args.template, keep_family=bool(args.pack),
                             family=args.family)
    else:
        pack = check_template(pack)  # before the model loads: a broken template fails at once
    if not args.replay and pack.gguf is not None:
        check_model(pack.gguf)
    return pack


def with_template(pack: Pack, path: Path, *, keep_family: bool, family: str | None) -> Pack:
    """The local model rendering with the template in `path` (`--template FILE` without
    `--upstream`). With `--pack` (keep_family) the pack's family, thinking default and stop
    strings stay, as with `--upstream --pack P --template F`; otherwise it is detected from
    the given template, as for a GGUF's own. The template must compile and render a
    one-message conversation, or start-up stops naming the file and the line."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise SystemExit(f"prism: cannot read --template {path}: {e}") from None
    if keep_family:
        pack = replace(pack, template=text, tool_template="", template_origin=str(path))
    else:
        found = pack_from_template(pack.name, text, str(path), bos_token=pack.bos_token,
                                   eos_token=pack.eos_token)
        pack = replace(found, gguf=pack.gguf, n_ctx=pack.n_ctx, description=pack.description)
    if family:
        pack = replace(pack, family=family, family_origin="--family")
    return check_renders(pack)


def replay_tokenizer(pack: Pack):
    """What a replay counts tokens with (issue 24, item 2): the pack's GGUF vocabulary (exact),
    else the default model's (an estimate, but a BPE one, far closer than the replay's text
    split), else None (the split). Returns (tokenize or None, counts estimated)."""
    from engine.backends.llama.vocab import Vocab

    for gguf, estimated in ((pack.gguf, False), (_default_gguf(), True)):
        if gguf is None:
            continue
        try:
            return Vocab(gguf).tokenize, estimated
        except (OSError, ValueError) as e:  # not a GGUF llama.cpp can read
            logging.getLogger("prism").warning("prism: cannot read the vocabulary of %s (%s)",
                                               gguf, e)
    return None, True


def _default_gguf() -> Path | None:
    try:
        return resolve_pack(DEFAULT_PACK, None, require_model=False).gguf
    except PackError:
        return None


def build_service(args: argparse.Namespace) -> Service:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    pack = None if args.upstream else resolve(args)
    if args.upstream:
        engine, pack = upstream.build_upstream(args)
    elif args.replay:
        from engine.record.replay import ReplayEngine

        tokenizer, estimated = replay_tokenizer(pack)
        engine = ReplayEngine([Path(f) for f in args.replay], speed=args.replay_speed,
                              tools_only=args.replay_tools_only,
                              calls_need_tools=not args.replay_strict_order,
                              family=pack.family, tokenizer=tokenizer,
                              counts_estimated=estimated,
                              **({"n_ctx": args.n_ctx} if args.n_ctx else {}))
    else:
        from engine.backends.llama.engine import LlamaEngine

        if pack.gguf is None:
            raise SystemExit(f"prism: pack {pack.name!r} names no GGUF; use --model FILE.gguf")
        n_ctx, kv_unified = context_size(args, pack)
        try:
            engine = LlamaEngine(pack.gguf, n_ctx=n_ctx, kv_unified=kv_unified,
                                 n_gpu_layers=args.n_gpu_layers,
                                 n_threads=args.threads, parallel=args.parallel,
                                 preserved=preserved_tokens(pack.family),
                                 cache_dir=disk_cache_dir(args), cache_size=args.cache_size,
                                 speculate=args.speculate == "ngram",
                                 flash_attn=args.flash_attn)
        except (OSError, ValueError) as e:  # llama.cpp refused the file (its vocabulary)
            raise SystemExit(f"prism: cannot load the model {pack.gguf}: {e}") from None
    recorder = None
    if not args.no_record:
        # No --record-to: the Recorder picks a new file of its own (exclusive create, 0600 in
        # a 0700 folder), so two instances started in the same second keep both recordings.
        where = engine.base if args.upstream else REPLAY if args.replay else LOCAL
        recorder = Recorder(args.record_to, model=engine.name, pack=pack.name,
                            upstream=engine.base if args.upstream else "",
                            info=describe(pack, where, engine.name).to_dict(),
                            token_counts_estimated=getattr(engine, "counts_estimated", False))
    service = Service(engine, pack, metrics=Metrics(engine), recorder=recorder)
    service.escape_special = args.escape_special  # engine/chat/special.py
    service.guard_calls = not args.no_guard_calls  # engine/backends/llama/guard.py
    service.reasoning_budget = args.reasoning_budget  # engine/chat/budget.py
    service.embedder = embed.embedder_for(args, engine)  # /v1/embeddings (app/embed.py)
    return service
