"""The `prism stats` verb: the ledger of recordings, and why each request stopped.

    prism stats RECORDING... [--by model|quant|family|template|engine[,...]] [--json]
                [--requests]
    prism stats --context RECORDING... [--tokenizer PACK|FILE.gguf] [--json]

Reads the recordings (engine/record/ledger.py) and prints one column per group (by default
every key: model file, quant, family, template hash, engine): replies, calls, finish reasons,
each anomaly kind per 1,000 replies, the verdicts (engine/record/verdict.py), and the TTFT
and tokens/s medians. `--json` prints the rows as one JSON object; `--requests` adds one line
per request with its verdict and the raw span of the event that decided it. Runs on the main
thread; no engine, no model, no Qt.
"""

from __future__ import annotations

import argparse
import json
import sys

from app import context_report
from engine.record.ledger import KEYS, Reply, ledger, read_replies, table
from engine.record.reader import is_recording


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("recordings", nargs="+", metavar="RECORDING", help="Prism recordings (.jsonl)")
    p.add_argument("--by", default=",".join(KEYS),
                   help=f"group by these keys, comma-separated: {', '.join(KEYS)} "
                   "(default: all of them)")
    p.add_argument("--json", action="store_true", help="print the ledger as JSON")
    p.add_argument("--requests", action="store_true",
                   help="also list every request with its verdict and deciding event")
    context_report.add_arguments(p)


def _by(text: str) -> tuple[str, ...]:
    by = tuple(k.strip() for k in text.split(",") if k.strip())
    bad = [k for k in by if k not in KEYS]
    if bad or not by:
        raise ValueError(f"--by takes {', '.join(KEYS)}, not {text!r}")
    return by


def _request(r: Reply) -> dict:
    v = r.verdict
    return {"recording": r.source, "id": r.id, "finish": r.finish, "verdict": v.kind,
            "label": v.label, "detail": v.detail, "event": v.event,
            "span": list(v.span) if v.span else None}


def render(lines: list[tuple[str, list[str]]]) -> str:
    """The ledger's lines as aligned text: one column per group."""
    width = max(len(label) for label, _ in lines)
    cols = [max(len(cells[i]) for _, cells in lines) for i in range(len(lines[0][1]))]
    out = []
    for label, cells in lines:
        out.append("  ".join([label.ljust(width), *(c.rjust(w) for c, w in zip(cells, cols,
                                                                                  strict=True))]))
    return "\n".join(out)


def run(args: argparse.Namespace) -> int:
    if args.context:
        return context_report.run(args)
    try:
        by = _by(args.by)
    except ValueError as e:
        print(f"prism stats: {e}", file=sys.stderr)
        return 2
    for path in args.recordings:
        try:
            ok = is_recording(path)
        except OSError as e:
            print(f"prism stats: {e}", file=sys.stderr)
            return 1
        if not ok:
            print(f"prism stats: {path} is not a Prism recording", file=sys.stderr)
            return 1
    replies = read_replies(args.recordings)
    rows = ledger(replies, by)
    if args.json:
        doc: dict = {"by": list(by), "rows": [r.to_dict() for r in rows]}
        if args.requests:
            doc["requests"] = [_request(r) for r in replies]
        print(json.dumps(doc, indent=2, ensure_ascii=False))
        return 0
    if not rows:
        print("no requests recorded")
        return 0
    print(render(table(rows)))
    if args.requests:
        print()
        for r in replies:
            v = r.verdict
            where = f" at event {v.event}, chars {v.span[0]}–{v.span[1]}" if v.span else ""
            print(f"{r.id}  {v.label}{where}: {v.detail}")
    return 0
