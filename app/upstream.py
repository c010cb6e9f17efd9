"""`--upstream URL`: the command-line options and wiring for a remote engine.

Owns `add_arguments` (the upstream flags, shared by `gui` and `serve`) and `build_upstream`,
which starts an `UpstreamEngine` (engine/backends/upstream/engine.py), waits briefly for its first
answer, and picks the chat template Prism renders with: `--template FILE`, else the `--pack`'s,
else the one the upstream publishes (llama.cpp's server and Prism give it in `GET /props`), the
tool-call family and the thinking default detected from it as for a GGUF. The template's
`bos_token` / `eos_token` are `--bos-token` / `--eos-token`, else the pack's own (with `--pack`),
else what `/props` reports (llama.cpp's server and Prism do; llama-cpp-python's server does not,
and a template that writes them is then warned about). With `--tap` no template is needed
(requests are forwarded as they are), only a family to re-read the upstream's output. Runs on
the main thread at start-up.
"""

from __future__ import annotations

import argparse
import logging
import os
from dataclasses import replace
from pathlib import Path

from app.preflight import check_template
from engine.backends.base import Engine
from engine.backends.upstream.engine import UpstreamEngine
from engine.backends.upstream.wire import UpstreamInfo
from engine.chat.detect import preserved_tokens
from engine.chat.packs import Pack, PackError, pack_from_template, resolve_pack

log = logging.getLogger("prism")
FIRST_ANSWER_S = 15.0  # how long start-up waits for the upstream's model list and /props


def add_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("a remote engine (vLLM, SGLang, llama.cpp's server, Ollama, Prism)")
    g.add_argument("--upstream", metavar="URL",
                   help="generate on this OpenAI-compatible server (http://host:8000/v1): Prism "
                   "renders the template, sends the prompt to its /v1/completions and parses")
    g.add_argument("--upstream-key", default=os.environ.get("PRISM_UPSTREAM_KEY"),
                   help="API key for the upstream (default: $PRISM_UPSTREAM_KEY)")
    g.add_argument("--upstream-model", help="the upstream's model id (default: the first one "
                   "its /v1/models lists)")
    g.add_argument("--upstream-max-inflight", type=int, default=16,
                   help="requests in flight at the upstream before new ones get 429 (default 16)")
    g.add_argument("--upstream-timeout", type=float, default=600.0,
                   help="seconds to wait for the upstream's next byte (default 600)")
    g.add_argument("--template", type=Path, metavar="FILE",
                   help="render with this Jinja chat template (with --upstream: instead of the "
                   "pack's or the upstream's own)")
    g.add_argument("--bos-token", metavar="TEXT",
                   help="with --upstream: the text the template's bos_token stands for (default: "
                   "the pack's, else the upstream's /props: llama.cpp's server reports it)")
    g.add_argument("--eos-token", metavar="TEXT",
                   help="with --upstream: the text the template's eos_token stands for (default: "
                   "as for --bos-token)")
    g.add_argument("--tap", action="store_true",
                   help="with --upstream: forward chat, messages and responses requests "
                   "unchanged and record the upstream's own parsing (see docs/upstream.md)")


def special_tokens(args: argparse.Namespace, info: UpstreamInfo,
                   pack: Pack | None = None) -> tuple[str, str]:
    """BOS and EOS text for the template: the flag, else the pack's own, else /props'."""
    def pick(flag: str, own: str, published: str) -> str:
        given = getattr(args, flag, None)  # absent from callers that build their own Namespace
        return given if given is not None else (own or published)

    own_bos, own_eos = (pack.bos_token, pack.eos_token) if pack is not None else ("", "")
    return (pick("bos_token", own_bos, info.bos_token),
            pick("eos_token", own_eos, info.eos_token))


def _with_tokens(pack: Pack, bos: str, eos: str) -> Pack:
    stop = pack.stop + ((eos,) if eos and eos not in pack.stop else ())
    return replace(pack, bos_token=bos, eos_token=eos, stop=stop)


def _warn_missing_tokens(pack: Pack, base: str) -> None:
    for var, text, flag in (("bos_token", pack.bos_token, "--bos-token"),
                            ("eos_token", pack.eos_token, "--eos-token")):
        if not text and var in pack.template + pack.tool_template:
            log.warning("[prism] the chat template (%s) writes %s, but %s reports none in /props, "
                        "so it renders as nothing: pass %s TEXT", pack.template_origin, var,
                        base, flag)


def upstream_pack(args: argparse.Namespace, engine: UpstreamEngine) -> Pack:
    pack = _upstream_pack(args, engine)
    _warn_missing_tokens(pack, engine.base)
    return pack


def _upstream_pack(args: argparse.Namespace, engine: UpstreamEngine) -> Pack:
    info, name = engine.info, engine.name
    template = None
    if args.template is not None:
        try:
            template = args.template.read_text(encoding="utf-8")
        except OSError as e:
            raise SystemExit(f"prism: cannot read --template {args.template}: {e}") from None
    family = args.family
    try:
        if args.pack:
            pack = replace(resolve_pack(args.pack, require_model=False, family=family),
                           gguf=None)
            if template is not None:
                pack = replace(pack, template=template, template_origin=str(args.template),
                               tool_template="")
            return check_template(_with_tokens(pack, *special_tokens(args, info, pack)))
        bos, eos = special_tokens(args, info)
        if template is not None:
            pack = pack_from_template(name, template, str(args.template), bos_token=bos,
                                      eos_token=eos)
        elif info.chat_template:
            pack = pack_from_template(name, info.chat_template, f"GET {engine.root}/props",
                                      bos_token=bos, eos_token=eos)
        elif args.tap:  # nothing to render; the re-reading takes either call syntax
            pack = Pack(name=name, gguf=None, template="", family="auto",
                        template_origin="none (--tap forwards requests as they are)")
        else:
            raise SystemExit(
                f"prism: {engine.base} publishes no chat template (only llama.cpp's server and "
                "Prism do, in /props); pass --pack NAME (qwen3-xml, qwen3-hermes, ...) or "
                "--template FILE")
    except PackError as e:
        raise SystemExit(f"prism: {e}") from None
    if family:
        pack = replace(pack, family=family, family_origin="--family")
    return check_template(pack)


def build_upstream(args: argparse.Namespace) -> tuple[Engine, Pack]:
    # httpx logs every request at INFO: the reachability probe would print a line every few
    # seconds. Prism's own request log says what matters.
    logging.getLogger("httpx").setLevel(logging.WARNING)
    if args.replay or args.model:
        raise SystemExit("prism: --upstream generates remotely; it takes no --model or --replay")
    engine = UpstreamEngine(args.upstream, api_key=args.upstream_key,
                            model=args.upstream_model, timeout=args.upstream_timeout)
    engine.ready.wait(FIRST_ANSWER_S)
    if engine.load_error:
        # Start anyway: /health says why, and the first request that gets through works.
        log.warning("[prism] %s", engine.load_error)
    pack = upstream_pack(args, engine)
    engine.stops = pack.stop
    engine.preserved = preserved_tokens(pack.family)
    if args.tap:
        from app.api.tap import TapEngine

        return TapEngine(engine), pack
    return engine, pack
