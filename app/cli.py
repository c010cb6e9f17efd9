"""The `prism` command line: one module per verb (mlx-lm style), dispatched from here.

    prism [gui] ...        the inspector window (app/gui.py)
    prism serve ...        the local server only (app/serve.py)
    prism parse ...        run the output parser over a file (app/parse.py)

Runs on the main thread; each verb module exposes `add_arguments(parser)` and `run(args)`.
"""

from __future__ import annotations

import argparse
import importlib
import sys

VERBS = {
    "gui": ("app.gui", "open the inspector window (the default)"),
    "serve": ("app.serve", "serve OpenAI / Anthropic / Responses APIs on localhost"),
    "parse": ("app.parse", "parse a model's raw output into reasoning, content and tool calls"),
}


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="prism", description="Inspector and local server for LLM output.")
    sub = ap.add_subparsers(dest="verb")
    for verb, (mod_name, help_text) in VERBS.items():
        mod = importlib.import_module(mod_name)
        p = sub.add_parser(verb, help=help_text, description=help_text)
        mod.add_arguments(p)
        p.set_defaults(_module=mod)
    return ap


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in VERBS and argv[0] not in ("-h", "--help"):
        argv = ["gui", *argv]  # `prism` alone (or with gui options) opens the inspector
    args = build_parser().parse_args(argv)
    return int(args._module.run(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
