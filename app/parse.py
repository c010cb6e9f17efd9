"""The `prism parse` verb: run the output parser over a model's raw output and print the result.

    prism parse [FILE|-] [--tools TOOLS.json] [--no-thinking]
                [--family auto|qwen-xml|hermes-json|FAMILY] [--stream-tools]
                [--chunk N] [--seed S] [--events]

Reads UTF-8 from FILE or standard input, feeds it whole, N characters at a time, or in random
sizes 1–9 (`--chunk 0`, seeded by `--seed`), and prints one JSON object (or, with `--events`,
one JSON object per event). Runs on the main thread; no engine, no model.
"""

from __future__ import annotations

import argparse
import json
import random
import sys

from engine.parse import families
from engine.parse.events import result_of
from engine.parse.parser import OutputParser


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", nargs="?", default="-", help="the raw output (default: stdin)")
    p.add_argument("--tools", help="a JSON file holding an OpenAI-style tools array")
    p.add_argument("--no-thinking", action="store_true",
                   help="start in content (default: in reasoning, as when the template "
                   "opened <think>)")
    p.add_argument("--family", choices=families.NAMES, default="auto")
    # The flag's name before the concept was called a family; kept so scripts keep working.
    p.add_argument("--dialect", dest="family", choices=families.NAMES,
                   default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    p.add_argument("--stream-tools", action="store_true",
                   help="emit tool_start/tool_args events while calls are written")
    p.add_argument("--chunk", type=int, default=None,
                   help="feed N characters at a time; 0 feeds random sizes 1-9")
    p.add_argument("--seed", type=int, default=0, help="seed for --chunk 0")
    p.add_argument("--events", action="store_true", help="print the events, one per line")


def _fail(msg: str) -> int:
    print(f"prism parse: {msg}", file=sys.stderr)
    return 2


def _read_text(path: str) -> str:
    if path == "-":
        return sys.stdin.buffer.read().decode("utf-8")
    with open(path, "rb") as f:
        return f.read().decode("utf-8")


def _read_tools(path: str) -> list:
    with open(path, encoding="utf-8") as f:
        tools = json.load(f)
    if isinstance(tools, dict) and isinstance(tools.get("tools"), list):
        tools = tools["tools"]
    if not isinstance(tools, list) or not all(isinstance(t, dict) for t in tools):
        raise ValueError("expected a JSON array of tool objects")
    return tools


def chunks(text: str, size: int | None, seed: int):
    """The pieces the text is fed in: whole, fixed size, or random 1-9 (size 0)."""
    if size is None or (size > 0 and size >= len(text)):
        yield text
        return
    rng = random.Random(seed)
    i = 0
    while i < len(text):
        n = size if size > 0 else rng.randint(1, 9)
        yield text[i : i + n]
        i += n


def run(args: argparse.Namespace) -> int:
    try:
        text = _read_text(args.file)
    except (OSError, UnicodeDecodeError) as e:
        return _fail(f"cannot read {args.file}: {e}")
    tools: list = []
    if args.tools:
        try:
            tools = _read_tools(args.tools)
        except (OSError, UnicodeDecodeError, ValueError) as e:
            return _fail(f"bad tools file {args.tools}: {e}")
    if args.chunk is not None and args.chunk < 0:
        return _fail("--chunk must be 0 or more")
    parser = OutputParser(
        start="content" if args.no_thinking else "reasoning",
        family=args.family,
        tools=tools,
        stream_tools=args.stream_tools,
        id_prefix="",
    )
    events = []
    for piece in chunks(text, args.chunk, args.seed):
        events.extend(parser.feed(piece))
    events.extend(parser.finish())
    out = sys.stdout
    if args.events:
        for ev in events:
            out.write(json.dumps(ev.to_dict(), ensure_ascii=False) + "\n")
    else:
        out.write(json.dumps(result_of(events).to_dict(), ensure_ascii=False, indent=2) + "\n")
    return 0
