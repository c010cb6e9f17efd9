"""`prism stats --context`: where each recorded request's prompt went, in real tokens.

    prism stats --context RECORDING... [--tokenizer PACK|FILE.gguf] [--json]

Owns `add_arguments` (the two flags `prism stats` adds) and `run`. For every request of the
recordings: its prompt's tokens by part (system, each tool's schema, each message, tool calls
and results in the history, replayed reasoning, the template's scaffolding;
engine/record/context.py), the tools it declared but never called, and where its prompt left
the previous request's (the tokens the two share from the start). The tokenizer is the
recording's pack's model when that pack ships one (or `--tokenizer`), else the default model's,
and the output says which; the template is the recording's pack's, so tools are located in the
prompt when it still renders the recorded prompt. Runs on the main thread; no engine, no Qt.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path

from engine.chat.packs import DEFAULT_PACK, Pack, PackError, resolve_pack
from engine.chat.request import ChatRequest
from engine.grammar.tools import request_thinking
from engine.record import context
from engine.record.reader import load_recording
from engine.record.recording import RecordingError


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--context", action="store_true",
                   help="per request: the prompt's tokens by part (system, tools, messages, "
                   "tool calls and results, reasoning, template), and unused tools")
    p.add_argument("--tokenizer", metavar="PACK|FILE.gguf", default="",
                   help="with --context: count with this model's tokenizer (default: the "
                   "recording's pack's model, else the default model's)")


def _pack(name: str) -> Pack | None:
    try:
        return resolve_pack(name, require_model=False)
    except PackError:
        return None


def _tokenizer(choice: str, pack: Pack | None) -> tuple[Callable[[str], list[int]], str, object]:
    """The tokenize function, the model file it comes from, and the object to close."""
    from engine.backends.llama.vocab import Vocab

    if choice:
        path = Path(choice).expanduser()
        gguf = path if path.suffix == ".gguf" else resolve_pack(choice).gguf
    else:
        gguf = pack.gguf if pack is not None and pack.gguf is not None else \
            resolve_pack(DEFAULT_PACK).gguf
    vocab = Vocab(gguf)
    return vocab.tokenize, Path(gguf).name, vocab


def _renderer(pack: Pack | None) -> Callable[[ChatRequest], str] | None:
    if pack is None:
        return None
    template = pack.chat_template()

    def render(req: ChatRequest) -> str:
        return template.render(req.messages, tools=req.tools,
                               add_generation_prompt=req.add_generation_prompt,
                               enable_thinking=request_thinking(req, pack.thinking),
                               continue_final=req.continue_final)
    return render


def _line(b: context.Breakdown) -> str:
    by = b.by_kind()
    cells = [f"{k} {n} ({100 * n / b.total:.0f}%)" for k, n in by.items() if n and b.total]
    return " · ".join(cells)


def run(args: argparse.Namespace) -> int:
    out: list[dict] = []
    for path in args.recordings:
        try:
            session = load_recording(path, tokens=False)
        except (OSError, RecordingError, UnicodeDecodeError) as e:
            print(f"prism stats: {path}: {e}", file=sys.stderr)
            return 1
        pack = _pack(str(session.header.get("pack", "")))
        try:
            tokenize, model, vocab = _tokenizer(args.tokenizer, pack)
        except (PackError, OSError, ValueError) as e:
            print(f"prism stats: no tokenizer for {path}: {e}", file=sys.stderr)
            return 1
        render = _renderer(pack)
        try:
            if not args.json:
                print(f"{path} · tokens counted with {model}"
                      f"{'' if pack else ' · template unknown: tools counted as JSON'}")
            previous = ""
            for r in session.requests:
                if not r.prompt:
                    continue
                b = context.of_request(r.prompt, r.request, tokenize, render)
                shared = context.prompt_diff(previous, r.prompt, tokenize).common_prefix \
                    if previous else 0
                previous = r.prompt
                row = {"recording": str(path), "id": r.id, "tokens": b.total,
                       "by_kind": b.by_kind(), "unused_tools": list(b.unused_tools()),
                       "shared_with_previous": shared, "tokenizer": model,
                       "parts": [{"kind": p.kind, "label": p.label, "tokens": p.tokens,
                                  "located": p.located} for p in b.parts]}
                out.append(row)
                if not args.json:
                    unused = (f" · never called: {', '.join(b.unused_tools())}"
                              if b.unused_tools() else "")
                    print(f"{r.id}  {b.total} tokens · shares {shared} with the previous "
                          f"prompt\n    {_line(b)}{unused}")
        finally:
            vocab.close()
    if args.json:
        print(json.dumps({"requests": out}, indent=2, ensure_ascii=False))
    return 0
