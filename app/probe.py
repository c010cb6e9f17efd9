"""`prism probe FILE.jinja|GGUF`: the call syntax a chat template shows, derived and self-tested.

Owns the verb's arguments and `run`: the template (a .jinja file, or a GGUF's own template and
its tool_use one) is rendered with the probe conversations (engine/chat/probe.py), the derived
record is self-tested (engine/chat/probe_check.py) and checked against the family its markers
name (engine/chat/detect.py); all of it is printed: the record, the probe renders it came from,
the self-test and what Prism would read the model's output as. Exit status 0 when a format was
derived and passed its self-test, 1 otherwise (2: the file cannot be read). Runs on the main
thread; loads no model (a GGUF's metadata only).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", help="a chat template (.jinja) or a GGUF whose template to probe")


def _template(path: Path) -> tuple[str, str]:
    """(template, tool_use template) of a .jinja file or a GGUF's metadata."""
    if path.suffix == ".gguf":
        from engine.chat.packs import TOOL_USE_KEY, read_gguf_metadata

        meta = read_gguf_metadata(path)
        own = meta.get("tokenizer.chat_template")
        tool = meta.get(TOOL_USE_KEY)
        own = own if isinstance(own, str) else ""
        tool = tool if isinstance(tool, str) and tool != own else ""
        if not (own or tool).strip():
            raise ValueError(f"{path.name} carries no chat template")
        return own or tool, tool if own else ""
    return path.read_text(encoding="utf-8"), ""


def run(args: argparse.Namespace) -> int:
    from engine.chat.detect import detect, format_label
    from engine.chat.packs import PackError

    path = Path(args.file).expanduser()
    try:
        template, tool = _template(path)
    except (OSError, ValueError, PackError, UnicodeDecodeError) as exc:
        print(f"prism probe: {exc}", file=sys.stderr)
        return 2
    found = detect(template, tool)
    v = found.verdict
    if v is None:
        print("prism probe: the probe could not run on this template", file=sys.stderr)
        return 1
    p = v.probe
    print(f"template: {path}" + (" (and its tool_use template)" if tool else ""))
    print("\nprobe renders:")
    for r in p.renders:
        print(f"  --- {r.label}\n" + "\n".join("    " + line for line in r.text.split("\n")))
    print("\nderived record:")
    if p.format is None:
        print(f"  none: {p.why}")
    else:
        print(f"  {p.format.describe()}")
        for f in dataclasses.fields(p.format):
            value = getattr(p.format, f.name)
            if value != f.default and f.name != "shape":
                print(f"    {f.name} = {value!r}")
    print(f"  reasoning: {p.reasoning or 'none shown'}"
          + (" (the prompt opens it with thinking on)" if p.opens_reasoning else ""))
    print("\nself-test:", "passed: every rendered call reads back exactly, whole, per "
          "character and in random chunks" if v.passed else
          f"failed: {v.failure}" if v.failure else "not run")
    if v.claimed:
        print(f"markers name: {v.claimed} ({'reads' if v.agrees else 'does not read'} the "
              "template's rendered calls)")
    if v.note:
        print(f"note: {v.note}")
    print(f"format: {format_label(found.family, found.unknown)}"
          + (f" — {found.describe()}" if found.describe() else ""))
    return 0 if v.passed else 1
