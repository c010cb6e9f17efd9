"""The model families' dialects: how each family marks its reasoning and its tool calls.

Each dialect module exposes the same few names (mlx-lm style):

- `NAME`: the dialect's name on the command line ("qwen-xml", "harmony", ...).
- `MARKERS` (engine/parse/markers.py `Markers`): its reasoning opener and closer, its call openers
and
  message-frame tags; the `<think>` / `<tool_call>` ones when absent (Qwen XML, Hermes JSON).
- `PRESERVED_TOKENS`: the special tokens the parser must see as text (the engine renders
  exactly these; engine/chat/detect.py collects them).
- `match_opener(text, i) -> Match`: does a call body begin at `text[i]` (right after a call
  opener and whitespace)? FULL, PREFIX (the text ends inside something that could still
  become one) or NONE.
- `CallParser(schemas, stream)`: an incremental reader for one call body (the text right after
  the call opener), fed with `feed(text)` and closed with `finish()`. It appends
  `(kind, text, rel_end)` items to `out` ("start" with the name, "args" with a JSON fragment)
  and sets `done`/`end`/`error`/`resume`/`name`/`arguments`; optionally `follow()`, the reader
  of the next call of the same list (Mistral's, Llama's).

Shared readers: engine/parse/families/framed.py (markers around a name and JSON arguments),
engine/parse/families/tagged.py (key/value parameters between tags). This package owns the choice of
dialect (`opener_dialect`, `markers`); the parser owns everything around the body
(docs/design.md, section 4). Pure Python, run by whichever thread drives the parser.
"""

from __future__ import annotations

from types import ModuleType

from engine.parse.families import (
    deepseek,
    dsml,
    gemma4,
    glm,
    harmony,
    hermes_json,
    kimi_k2,
    llama3_json,
    minimax_xml,
    mistral,
    qwen_xml,
)
from engine.parse.families.common import FULL, NONE, PREFIX, Match
from engine.parse.markers import THINK_MARKERS, Markers

# The families, in the order of issue 12 after the two `<think>` / `<tool_call>` dialects.
_FAMILIES = (qwen_xml, hermes_json, harmony, deepseek, dsml, glm, kimi_k2, minimax_xml,
             mistral, gemma4, llama3_json)
DIALECTS = {mod.NAME: mod for mod in _FAMILIES}
NAMES = ("auto", *DIALECTS)
# `auto` reads the two `<tool_call>` dialects, whichever opener the model writes (never the
# other families: GLM's `<tool_call>NAME` must not become a call of a Qwen model).
AUTO = (qwen_xml, hermes_json)

__all__ = ["DIALECTS", "FULL", "NAMES", "NONE", "PREFIX", "Match", "markers", "opener_dialect"]


def markers(dialect: str) -> Markers:
    """The family's tags (`auto`, Qwen XML and Hermes JSON share `<think>` / `<tool_call>`)."""
    mod = DIALECTS.get(dialect)
    return getattr(mod, "MARKERS", THINK_MARKERS)


def opener_dialect(dialect: str, text: str, i: int) -> tuple[Match, ModuleType | None]:
    """Which dialect's opener starts at text[i]: (FULL, module), (PREFIX, None) or (NONE, None).

    `dialect` is "auto" or one of DIALECTS; auto accepts either opener.
    """
    mods = AUTO if dialect == "auto" else (DIALECTS[dialect],)
    undecided = False
    for mod in mods:
        m = mod.match_opener(text, i)
        if m == FULL:
            return FULL, mod
        if m == PREFIX:
            undecided = True
    return (PREFIX, None) if undecided else (NONE, None)
