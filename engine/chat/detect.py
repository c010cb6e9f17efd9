"""Model families: which tool-call dialect a chat template was written for, and where its
reasoning starts.

Owns `Family` (one family's template signature, reasoning markers, shipped pack and the
stop strings that are safe for it), `FAMILIES` (in detection order), `detect(template)` (a
template's text -> the family whose markers it contains) and `start_state(prompt, dialect)`
(does the rendered prompt leave the model inside that family's reasoning?). Pure functions
over strings, no I/O; any thread may call them (startup for detection, the request's thread
for the start state). docs/design.md, section "Model families".

Detection reads the template's own markers, most specific first: DeepSeek V3.2's `｜DSML｜`
before DeepSeek's `<｜tool▁calls▁begin｜>` (V3.2 templates may mention both), Harmony's
`<|channel|>` before Gemma 4's `<|channel>`, Qwen XML's `<parameter=` before Hermes's
`<tool_call>` (GLM writes `<tool_call>` too, so `<arg_key>` is tested first). A template that
matches none keeps `auto` (Qwen XML or Hermes JSON, whichever opener the model writes).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from engine.chat.request import Message
from engine.parse import families as dialects
from engine.parse.events import CONTENT, REASONING, TOOL_CALL, Event

THINK = ("<think>", "</think>")


@dataclass(frozen=True, slots=True)
class Family:
    """One model family. `markers`: any of them in a chat template selects the family.
    `reasoning`: the (opener, closer) of its reasoning as templates and models write them;
    None where the family has no reasoning block. `thinking`: whether its pack thinks by
    default. `pack`: the built-in pack (resources/packs/PACK.toml) that ships its template.
    `stop`: the end-of-turn texts a pack of this family stops on (Harmony's `<|end|>` ends a
    message, not the turn, so it must never be a stop string there)."""

    dialect: str
    models: str
    markers: tuple[str, ...]
    reasoning: tuple[str, str] | None
    thinking: bool
    pack: str
    stop: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Detection:
    """What `detect` found: the dialect, the marker that decided it ("" when none did) and the
    family's reasoning markers (None when it has none, or for `auto`: `<think>`)."""

    dialect: str
    marker: str
    reasoning: tuple[str, str] | None
    family: Family | None


FAMILIES: tuple[Family, ...] = (
    Family("harmony", "gpt-oss", ("<|channel|>",),
           ("<|channel|>analysis<|message|>", "<|end|>"), True, "harmony",
           ("<|return|>", "<|call|>")),
    Family("dsml", "DeepSeek V3.2, V4", ("｜DSML｜",), THINK, True, "dsml",
           ("<｜end▁of▁sentence｜>",)),
    Family("deepseek", "DeepSeek R1, V3, V3.1", ("<｜tool▁calls▁begin｜>", "<｜Assistant｜>"),
           THINK, True, "deepseek", ("<｜end▁of▁sentence｜>",)),
    Family("kimi-k2", "Kimi K2, K2-Thinking", ("<|tool_calls_section_begin|>", "<|im_middle|>"),
           THINK, True, "kimi-k2", ("<|im_end|>",)),
    Family("minimax-xml", "MiniMax-M2", ("<minimax:tool_call>", "]~b]"), THINK, True,
           "minimax-xml", ("[e~[",)),
    Family("glm", "GLM-4.5, 4.6, 4.7", ("<arg_key>", "[gMASK]<sop>"), THINK, True, "glm",
           ("<|user|>", "<|observation|>")),
    Family("mistral", "Mistral Small 3.x, Magistral, Devstral", ("[TOOL_CALLS]", "[THINK]"),
           ("[THINK]", "[/THINK]"), False, "mistral", ("</s>",)),
    Family("gemma4", "Gemma 4", ("<|tool_call>", "<|channel>", "<|turn>"),
           ("<|channel>thought", "<channel|>"), False, "gemma4", ("<turn|>",)),
    Family("llama3-json", "Llama 3.1-3.3", ("<|python_tag|>", "<|start_header_id|>"), None,
           False, "llama3-json", ("<|eot_id|>", "<|eom_id|>")),
)
BY_DIALECT = {f.dialect: f for f in FAMILIES}


def detect(template: str) -> Detection:
    """The family a chat template was written for, from the markers it contains (see the
    module docstring for the order). Qwen XML and Hermes JSON templates keep their own
    dialects; anything else is `auto`."""
    for fam in FAMILIES:
        for marker in fam.markers:
            if marker in template:
                return Detection(fam.dialect, marker, fam.reasoning, fam)
    # `<parameter=` rather than `<function=`: a Hermes template may mention `<function=` too
    # (Prism's qwen3_hermes.jinja does, in its history repair); only XML templates write params.
    if "<parameter=" in template:
        return Detection("qwen-xml", "<parameter=", THINK, None)
    if "<tool_call>" in template:
        return Detection("hermes-json", "<tool_call>", THINK, None)
    return Detection("auto", "", THINK, None)


def reasoning_markers(dialect: str) -> tuple[str, str] | None:
    """A dialect's (opener, closer) of reasoning: the parser's own (the dialect module's
    MARKERS) once the dialect is registered, else the family table's; `<think>` for qwen-xml,
    hermes-json and auto."""
    if dialect in dialects.DIALECTS or dialect == "auto":
        m = dialects.markers(dialect)
        return (m.think_open, m.think_close) if m.think_open and m.think_close else None
    fam = BY_DIALECT.get(dialect)
    return fam.reasoning if fam is not None else THINK


def start_state(prompt: str, dialect: str = "auto") -> str:
    """'reasoning' when the rendered prompt ends inside the dialect's open reasoning (the
    template opened it for the model: DeepSeek R1's `<think>\\n`, a Harmony prompt prefilled
    with the analysis channel), else 'content'. Trailing whitespace is ignored."""
    markers = reasoning_markers(dialect)
    if markers is None:
        return "content"
    opener, closer = markers
    text = prompt.rstrip()
    opened = text.rfind(opener)
    if opened == -1:
        return "content"
    # The closer is searched only after the opener: Harmony's `<|end|>` closes every message.
    return "content" if text.find(closer, opened + len(opener)) != -1 else "reasoning"


def family_stops(dialect: str) -> tuple[str, ...] | None:
    """The stop strings a pack of this dialect's family uses, None for the older dialects
    (their packs pick them from the template, engine/chat/packs.py)."""
    fam = BY_DIALECT.get(dialect)
    return fam.stop if fam is not None else None


def preserved_tokens(dialect: str) -> tuple[str, ...]:
    """The special tokens the dialect's parser must see as text (each dialect module lists them
    in PRESERVED_TOKENS; `auto` takes those of every dialect it accepts). The engine renders
    exactly these as text (engine/backends/llama/vocab.py); the others, end-of-turn markers first,
    stay invisible."""
    names = ("qwen-xml", "hermes-json") if dialect == "auto" else (dialect,)
    seen: dict[str, None] = {}
    for name in names:
        mod = dialects.DIALECTS.get(name)
        for tok in getattr(mod, "PRESERVED_TOKENS", ()) if mod is not None else ():
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


def _call_cut(text: str, dialect: str, tail_only: bool) -> int:
    """Where the first complete call in reasoning `text` begins, as the family's parser reads
    it (it leaves the reasoning there: an implicit end); -1 when there is none. With
    tail_only, also -1 unless the calls end the text (no answer after them). Newlines before
    the call stay on the reasoning's side."""
    from engine.parse.parser import OutputParser  # the parser imports the dialects, as we do

    parser = OutputParser(start=REASONING, dialect=dialect)
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


def repair_message(message: Message, dialect: str) -> Message:
    """One assistant turn of a reasoning family with its swallowed call moved out of the
    reasoning (unchanged when it has none, or when the family has no reasoning block that a
    call could hide in: Harmony's analysis is a message of its own, Llama 3 has none)."""
    fam = BY_DIALECT.get(dialect)
    if message.role != "assistant" or fam is None or dialect not in dialects.DIALECTS:
        return message
    markers = dialects.markers(dialect)
    opener, closer = markers.think_open, markers.think_close
    if not opener or not closer or markers.reopen:
        return message
    reasoning, content = message.reasoning_content, message.content
    if reasoning and not message.tool_calls:  # (b) the reasoning ends with a call
        cut = _call_cut(reasoning, dialect, tail_only=True)
        if cut == -1:
            return message
        call = reasoning[cut:].rstrip()
        if content.strip():
            call += "\n" + content.lstrip("\n")
        return dataclasses.replace(message, reasoning_content=reasoning[:cut].rstrip("\n"),
                                   content=call)
    if reasoning is None and content.lstrip().startswith(opener) and closer not in content:
        at = content.find(opener) + len(opener)  # (a) the content opens it and never closes
        cut = _call_cut(content[at:], dialect, tail_only=False)
        if cut == -1:
            return message
        return dataclasses.replace(message, reasoning_content=content[at:at + cut].strip("\n"),
                                   content=content[at + cut:])
    return message
