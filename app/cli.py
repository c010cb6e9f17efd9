"""The `prism` command line: one module per verb (mlx-lm style), dispatched from here.

    prism [gui] ...        the inspector window (app/gui.py)
    prism serve ...        the local server only (app/serve.py)
    prism parse ...        run the output parser over a file (app/parse.py)
    prism probe FILE       the call syntax a chat template (.jinja or GGUF) shows (app/probe.py)
    prism doctor           versions, GPU support, model, paths and port, for bug reports
    prism stats ...        the ledger of recordings and why each request stopped (app/stats.py)
    prism rerun REC... ... re-run recorded requests on another engine (app/rerun.py)
    prism --version        the version

Runs on the main thread. Each verb module exposes `add_arguments(parser)` and `run(args)`; only
the chosen verb's module is imported, so `prism parse` never loads Qt or the model.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

# How long a thread may hold the GIL while another asks for it. The engine thread releases it
# for each `llama_decode` and wants it back the moment the decode returns, to sample; the
# pipeline, HTTP and GUI threads run Python meanwhile, and with CPython's default 5 ms the
# engine thread could wait up to that long per step (several streams: a step of 8 tokens
# handed on is work for the pipeline thread). 0.5 ms: bench/peers.py --gil compares the two.
SWITCH_INTERVAL_S = 0.0005

VERBS = {
    "gui": ("app.gui", "open the inspector window (the default)"),
    "serve": ("app.serve", "serve OpenAI / Anthropic / Responses APIs on localhost"),
    "parse": ("app.parse", "parse a model's raw output into reasoning, content and tool calls"),
    "probe": ("app.probe", "derive and self-test the tool-call format a chat template shows"),
    "doctor": ("app.doctor", "print what a bug report needs: versions, GPU support, model, paths"),
    "rerun": ("app.rerun", "send recorded requests again to another model, pack or upstream"),
    "stats": ("app.stats", "the ledger of recordings: finishes, anomalies, verdicts, medians"),
}


class _Parser(argparse.ArgumentParser):
    """A usage error is one line on stderr (exit status 2), not the whole usage block."""

    def error(self, message: str):  # type: ignore[override]
        self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")


def _usage() -> str:
    lines = [f"usage: prism [{'|'.join(VERBS)}] [options] | prism --version", "", "verbs:"]
    lines += [f"  {verb:7} {help_text}" for verb, (_, help_text) in VERBS.items()]
    lines += ["", "`prism VERB --help` shows a verb's options; `prism` alone opens the window."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in ("-h", "--help"):
        print(_usage())
        return 0
    if argv and argv[0] in ("-V", "--version"):
        from app.doctor import version

        print(f"prism {version('prism-inspector')}")
        return 0
    # PRISM_SWITCH_INTERVAL: the bench's way to run the same server with another value.
    sys.setswitchinterval(float(os.environ.get("PRISM_SWITCH_INTERVAL", SWITCH_INTERVAL_S)))
    verb = argv.pop(0) if argv and argv[0] in VERBS else "gui"
    mod_name, help_text = VERBS[verb]
    mod = importlib.import_module(mod_name)
    p = _Parser(prog=f"prism {verb}", description=help_text)
    mod.add_arguments(p)
    return int(mod.run(p.parse_args(argv)) or 0)


if __name__ == "__main__":
    sys.exit(main())
