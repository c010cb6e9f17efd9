"""The model families: one module per family, each ending with its `Family` record.

A family module owns everything of its family (registry.py's contract): its markers, its
streaming reader of one call (`match_opener` and `CallParser`), its writer, its detection
markers, stops, preserved tokens and forced-call grammar, then registers one `FAMILY`. This
package's face is the registry built from those records:

- `REGISTRY`: name -> `Family`, every family; `NAMES`: "auto" and every family's name.
- `get(name)`: the family, None for `auto`; `detect_order()`: the order detection tries them.
- `markers(name)`, `opener_family(name, text, i)`: what the parser asks.

A family's reader: `match_opener(text, i) -> Match`: does a call body begin at `text[i]` (right
after a call opener and whitespace)? FULL, PREFIX (the text ends inside something that could
still become one) or NONE. `CallParser(schemas, stream)`: an incremental reader for one call
body, fed with `feed(text)` and closed with `finish()`; it appends `(kind, text, rel_end)` items
to `out` ("start" with the name, "args" with a JSON fragment) and sets `done`/`end`/`error`/
`resume`/`name`/`arguments`; optionally `follow()`, the reader of the next call of the same list
(Mistral's, Llama's).

A family whose calls fit a shape is its record (`FORMAT`, engine/parse/shapes/record.py
`CallFormat`) handed to `shape_family` (engine/parse/shapes/build.py): the shape engine makes its
reader, writer and forced-call grammar (tagged key/value, a JSON object in a wrapper, a JSON list, a
Python-call list, a name in markers and a JSON arguments object). Shared readers here: framed.py
(markers around a name and JSON arguments), common.py (matching and the call-body base),
hermes_json.py's JSON scanner. Adding a family is one new module here: the package imports every
module it holds. Pure Python, standard library only, run by whichever thread drives the parser
(docs/design.md, sections 4 and 8).
"""

from __future__ import annotations

import importlib
import pkgutil

from engine.parse.families.common import FULL, NONE, PREFIX, Match
from engine.parse.families.registry import (
    CallGrammar,
    Family,
    Writer,
    detect_order,
    families,
    get,
    known,
)
from engine.parse.markers import THINK_MARKERS, Markers

# Every module here that is not a shared reader is a family: importing it registers it, so a
# new family is one new module and nothing else to edit (sorted, so the registration order,
# and with it the tie-break of detection, is the same on every machine).
_SHARED = frozenset({"common", "framed", "registry"})
for _mod in sorted(m.name for m in pkgutil.iter_modules(__path__)):
    if _mod not in _SHARED:
        importlib.import_module(f"{__name__}.{_mod}")

REGISTRY: dict[str, Family] = {f.name: f for f in families()}
NAMES = ("auto", *REGISTRY)
# `auto` reads the two `<tool_call>` families, whichever opener the model writes (never the
# other families: GLM's `<tool_call>NAME` must not become a call of a Qwen model).
AUTO = (REGISTRY["qwen-xml"], REGISTRY["hermes-json"])

__all__ = ["FULL", "NAMES", "NONE", "PREFIX", "REGISTRY", "CallGrammar", "Family", "Match",
           "Writer", "detect_order", "get", "known", "markers", "opener_family"]


def markers(name: str) -> Markers:
    """The family's tags (`auto` reads `<think>` / `<tool_call>`, as Qwen XML and Hermes do)."""
    fam = get(name)
    return fam.markers if fam is not None else THINK_MARKERS


def opener_family(name: str, text: str, i: int) -> tuple[Match, Family | None]:
    """Which family's opener starts at text[i]: (FULL, family), (PREFIX, None) or (NONE, None).

    `name` is "auto" or one of REGISTRY; auto accepts either `<tool_call>` family's opener.
    """
    fam = get(name)
    if name != "auto" and fam is None:
        raise KeyError(name)
    fams = AUTO if fam is None else (fam,)
    undecided = False
    for fam in fams:
        m = fam.match_opener(text, i)
        if m == FULL:
            return FULL, fam
        if m == PREFIX:
            undecided = True
    return (PREFIX, None) if undecided else (NONE, None)
