"""What a chat template and a rendered prompt say about the model family.

Owns `Detection` and `detect(template)` (a template's text -> the family whose markers it
contains, in the registry's order: engine/parse/families/registry.py `detect_order`),
`start_state(prompt, family)` (does the rendered prompt leave the model inside that family's
reasoning?), `family_stops`, `preserved_tokens` and history repair (`repair_message`). Every
family's markers come from its record in the registry; nothing here names one. Pure functions
over strings, no I/O; any thread may call them (startup for detection, the request's thread
for the start state). docs/design.md, section "Model families".

Detection reads the template's own markers, most specific first: a family that supersedes
another is tried before it (DSML before DeepSeek: V3.2 templates may mention both; Harmony's
`<|channel|>` before Gemma 4's `<|channel>`; GLM's `<arg_key>` before the `<tool_call>`
families), and the `<tool_call>` families (Qwen XML's `<parameter=`, Hermes's `<tool_call>`)
only when no other family matched. A template that matches none keeps `auto` (Qwen XML or
Hermes JSON, whichever opener the model writes).

The markers are then checked against the call syntax the template shows (engine/chat/probe.py
renders probe conversations and derives a `CallFormat` record; engine/chat/probe_check.py
self-tests it): where the rendered calls are another family's, or a derived format's, that
decides, not the header tokens (a Llama 3 header over a Python-call list is `pythonic`); a
template whose rendered calls no family and no derived record reads back is "format unknown",
with why.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from typing import Any

from engine.chat.request import Message
from engine.parse import families
from engine.parse.events import CONTENT, REASONING, TOOL_CALL, Event
from engine.parse.families import Family
from engine.parse.markers import THINK_CLOSE, THINK_OPEN

THINK = (THINK_OPEN, THINK_CLOSE)


@dataclass(frozen=True, slots=True)
class Detection:
    """What `detect` found: the family's name ("auto" when none), the marker that decided it
    ("" when none did), its reasoning markers (None when it has none; `<think>` for `auto`)
    and its record (`fam`)."""

    family: str
    marker: str
    reasoning: tuple[str, str] | None
    fam: Family | None
    unknown: bool = False  # the template offers tools but writes calls in no format we read
    # The probe's decision (engine/chat/probe_check.py `Verdict`); None where it did not run.
    verdict: Any = None

    def describe(self) -> str:
        """Why this family: the probe's derived format, its disagreement with the markers,
        or the marker (for the start line)."""
        v = self.verdict
        if self.family.startswith(PREFIX) and self.fam is not None:
            return f"format: derived from the template ({self.fam.format.describe()})"
        if v is not None and v.note:
            return f"format: {v.note}"
        if self.unknown and v is not None and v.why_unknown():
            return f"{UNKNOWN}: {v.why_unknown()}"
        return f"detected from {self.marker!r} in the chat template" if self.marker else ""


UNKNOWN = "format unknown: output shown as content"
PREFIX = "derived:"  # the name of a family derived from a template (engine/chat/probe_check.py)
log = logging.getLogger("prism")


def by_markers(template: str) -> Detection:
    """The family whose markers the template contains (see the module docstring for the
    order); `auto` when none is there."""
    for fam in families.detect_order():
        for marker in fam.detect:
            if marker in template:
                return Detection(fam.name, marker, fam.reasoning, fam)
    # A template that renders `tools` but names no family's markers writes its calls in a
    # format Prism has no reader for: say so rather than guess a neighbour (issue 19).
    return Detection("auto", "", THINK, None, unknown="tools" in template)


def detect(template: str, tool_source: str = "") -> Detection:
    """The family a chat template's model writes: its markers' (`by_markers`), checked against
    the calls the template renders (`tool_source`: a GGUF's tool_use template)."""
    from engine.chat.probe_check import verdict  # it renders templates, which import us

    found = by_markers(template)
    claimed = found.family if found.fam is not None else ""
    try:
        v = verdict(template, claimed, tool_source)
    except Exception as exc:  # a probe that fails decides nothing; the markers stand
        log.warning("[prism] the template probe failed: %s: %s", type(exc).__name__, exc)
        return found
    if v.family is not None and v.family.name != found.family:
        return Detection(v.family.name, "", v.family.reasoning, v.family, verdict=v)
    if found.fam is None and v.failure:
        return Detection("auto", "", THINK, None, unknown=True, verdict=v)
    return dataclasses.replace(found, verdict=v)


def format_label(family: str, unknown: bool = False) -> str:
    """How a format is named to people (title, /v1/models, doctor): the family's name,
    "derived from the template (…)" for a derived one, or "format unknown"."""
    if unknown:
        return UNKNOWN
    fam = families.get(family)
    if family.startswith(PREFIX) and fam is not None and fam.format is not None:
        return f"derived from the template ({fam.format.describe()})"
    return family


def reasoning_markers(family: str) -> tuple[str, str] | None:
    """A family's (opener, closer) of reasoning; `<think>` for auto."""
    fam = families.get(family)
    return fam.reasoning if fam is not None else THINK


def start_state(prompt: str, family: str = "auto") -> str:
    """'reasoning' when the rendered prompt ends inside the family's open reasoning (the
    template opened it for the model: DeepSeek R1's `<think>\\n`, a Harmony prompt prefilled
    with the analysis channel), else 'content'. Trailing whitespace is ignored."""
    fam = families.get(family)
    return (fam or families.get("qwen-xml")).start_state(prompt)


def family_stops(family: str) -> tuple[str, ...] | None:
    """The stop strings a pack of this family uses; None where the pack picks them from the
    template (the `<tool_call>` families and auto, engine/chat/packs.py)."""
    fam = families.get(family)
    return fam.stops if fam is not None and fam.stops else None


def preserved_tokens(family: str) -> tuple[str, ...]:
    """The special tokens the family's reader must see as text (`auto` takes those of both
    families it accepts). The engine renders exactly these as text (engine/backends/llama/
    vocab.py); the others, end-of-turn markers first, stay invisible."""
    fams = families.AUTO if family == "auto" else (families.get(family),)
    seen: dict[str, None] = {}
    for fam in fams:
        for tok in fam.preserved_tokens if fam is not None else ():
            seen[tok] = None
    return tuple(seen)


# --- history repair ------------------------------------------------------------------------------
# A model of a reasoning family sometimes writes a complete call inside its reasoning, without
# closing it. Shown that turn again as is, it learns from its own example to keep calls in the
# reasoning. As engine/chat/template.py does for Qwen's tags, the turn is repaired before rendering:
# the reasoning is closed where the call starts. "A real call" is decided by the family's own
# parser (engine/parse/parser.py), so the repair and the reading of the output never disagree: a
# call quoted, fenced or unfinished stays reasoning in both. The shipped family templates do the
# same in jinja (resources/templates/*.jinja), for GGUFs that take them elsewhere.


def _call_cut(text: str, family: str, tail_only: bool) -> int:
    """Where the first complete call in reasoning `text` begins, as the family's parser reads
    it (it leaves the reasoning there: an implicit end); -1 when there is none. With
    tail_only, also -1 unless the calls end the text (no answer after them). Newlines before
    the call stay on the reasoning's side."""
    from engine.parse.parser import OutputParser  # the parser imports the families, as we do

    parser = OutputParser(start=REASONING, family=family)
    events: list[Event] = parser.feed(text) + parser.finish()
    cut, called = -1, False
    for ev in events:
        if cut == -1:
            if ev.kind != REASONING:
                cut = ev.span[0]
        elif ev.kind == REASONING or (tail_only and ev.kind == CONTENT and ev.text.strip()):
            return -1
        called = called or ev.kind == TOOL_CALL
    if not called:
        return -1
    while text[cut:cut + 1] == "\n":
        cut += 1
    return cut


def repair_message(message: Message, family: str) -> Message:
    """One assistant turn of a reasoning family with its swallowed call moved out of the
    reasoning (unchanged when it has none, or when the family has no reasoning block that a
    call could hide in: Harmony's analysis is a message of its own, Llama 3 has none)."""
    fam = families.get(family)
    if message.role != "assistant" or fam is None or not fam.repairs_history:
        return message
    markers = fam.markers
    opener, closer = markers.think_open, markers.think_close
    if not opener or not closer or markers.reopen:
        return message
    reasoning, content = message.reasoning_content, message.content
    if reasoning and not message.tool_calls:  # (b) the reasoning ends with a call
        cut = _call_cut(reasoning, family, tail_only=True)
        if cut == -1:
            return message
        call = reasoning[cut:].rstrip()
        if content.strip():
            call += "\n" + content.lstrip("\n")
        return dataclasses.replace(message, reasoning_content=reasoning[:cut].rstrip("\n"),
                                   content=call)
    if reasoning is None and content.lstrip().startswith(opener) and closer not in content:
        at = content.find(opener) + len(opener)  # (a) the content opens it and never closes
        cut = _call_cut(content[at:], family, tail_only=False)
        if cut == -1:
            return message
        return dataclasses.replace(message, reasoning_content=content[at:at + cut].strip("\n"),
                                   content=content[at + cut:])
    return message
