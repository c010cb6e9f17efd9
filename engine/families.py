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

from dataclasses import dataclass

from engine import dialects

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
    (their packs pick them from the template, engine/packs.py)."""
    fam = BY_DIALECT.get(dialect)
    return fam.stop if fam is not None else None


def preserved_tokens(dialect: str) -> tuple[str, ...]:
    """The special tokens the dialect's parser must see as text (each dialect module lists them
    in PRESERVED_TOKENS; `auto` takes those of every dialect it accepts). The engine renders
    exactly these as text (engine/vocab.py); the others, end-of-turn markers first, stay
    invisible."""
    names = ("qwen-xml", "hermes-json") if dialect == "auto" else (dialect,)
    seen: dict[str, None] = {}
    for name in names:
        mod = dialects.DIALECTS.get(name)
        for tok in getattr(mod, "PRESERVED_TOKENS", ()) if mod is not None else ():
            seen[tok] = None
    return tuple(seen)
