"""The family contract: one typed record per model family, and the registry that holds them.

Owns `Family` (everything of one family that the rest of Prism asks about), `Writer` (the
family's own text for reasoning, an answer and a call: what its model would have written),
`CallGrammar` (how a forced call is written as GBNF, given engine/grammar's writer) and the
registry (`register`, `get`, `FAMILIES`, `detect_order`). Each family module under
engine/parse/families ends with one `FAMILY = register(Family(...))`; nothing outside a family
module names a family's markers: detection (engine/chat/detect.py), the start state, history
repair, the tap's writer (app/api/tap_readers.py), the forced-call grammars (engine/grammar/) and
the raw view (widgets/raw_view.py) ask the registry. Standard library only; the records are
frozen, built once at import, read by any thread.

Detection order is decided here, not hand-kept elsewhere: a family that names others in
`supersedes` is tried before them (DSML before DeepSeek: V3.2's templates mention both), and the
rest keep the order they registered in.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from engine.parse.events import ToolCall
from engine.parse.markers import THINK_CLOSE, THINK_OPEN, Markers


@dataclass(frozen=True, slots=True)
class Writer:
    """A family's own text, as its model writes it (docs/design.md, section 8).

    reasoning_open / reasoning_close: what opens a reasoning block the model opens itself and
        what ends it before the answer ("" for a family without reasoning).
    answer_open: what opens the answer after reasoning (Harmony's final channel), usually "".
    call: one call in the family's syntax, given the call and its index in the reply.
    calls_open / calls_sep / calls_close: what frames a list of calls (a section), what
        separates two, what closes the list.
    before_calls: what ends an answer that calls follow (a newline unless the answer ends
        with one; Harmony ends the answer's message).
    """

    call: Callable[[ToolCall, int], str]
    reasoning_open: str = ""
    reasoning_close: str = ""
    answer_open: str = ""
    calls_open: str = ""
    calls_sep: str = "\n"
    calls_close: str = ""
    before_calls: str = "\n"

    def write_reasoning(self, text: str, opened: bool = False) -> str:
        """A reasoning block holding `text`, closed; without its opener when the prompt opened
        it (`opened`: the reply starts in reasoning)."""
        return ("" if opened else self.reasoning_open) + text + self.reasoning_close

    def write_answer(self, text: str, after_reasoning: bool = False) -> str:
        """The answer `text`, opened as the family opens it after reasoning."""
        return (self.answer_open if after_reasoning else "") + text

    def write_calls(self, calls: Sequence[ToolCall], first: int = 0) -> str:
        """Calls in one list of the family's syntax (`first`: the index of the first in its
        reply, for the families whose call ids count them)."""
        if not calls:
            return ""
        body = self.calls_sep.join(self.call(c, first + i) for i, c in enumerate(calls))
        return self.calls_open + body + self.calls_close

    def write_call(self, call: ToolCall, index: int = 0) -> str:
        """One call alone, framed as a list of one."""
        return self.write_calls((call,), index)

    def write(self, reasoning: str | None, answer: str, calls: Sequence[ToolCall] = (),
              opened: bool = False) -> str:
        """A whole reply: reasoning (None: none), the answer, then the calls, each where the
        family puts it; `opened`: the prompt opened the reasoning."""
        out = ""
        if reasoning is not None and self.reasoning_close:
            out += self.write_reasoning(reasoning, opened)
        if answer:
            out += self.write_answer(answer, after_reasoning=bool(out))
            if calls and not (self.before_calls == "\n" and answer.endswith("\n")):
                out += self.before_calls
        return out + self.write_calls(calls)


@dataclass(frozen=True, slots=True)
class CallGrammar:
    """A forced call as GBNF: `call(w, i, fn)` writes tool `fn` (the OpenAI `function` object,
    the i-th declared) with engine/grammar/writer.py's `Writer` `w`; `open`, `sep` and `close`
    frame a list of calls; `several`: whether one reply may hold more than one."""

    call: Callable[[Any, int, dict], str]
    open: str = ""
    sep: str = ""
    close: str = ""
    several: bool = True


@dataclass(frozen=True, slots=True)
class Family:
    """One model family: everything of it that Prism asks about.

    name: its name on the command line and in recordings ("qwen-xml", "harmony", ...).
    models: the models it is for, for people.
    detect: template markers that select it, any one of them (`supersedes` orders families).
    markers: its tags as the parser reads them (reasoning, call openers, frame markup).
    match_opener / call_parser: its streaming reader of one call (engine/parse/parser.py).
    writer: its writer; reasoning_open/close there are how its prompts open reasoning too.
    stops: the end-of-turn texts its packs stop on; never_stops: its markers that must never
        be stop strings (Harmony's `<|end|>` ends a message, not the turn).
    preserved_tokens: the special tokens its reader must see as text.
    thinking: whether its pack thinks by default (None: whether the template writes
        `<think>`); pack: the built-in pack of its template.
    grammar: how `tool_choice` forces one of its calls (None: no forced-call grammar).
    repairs_history: whether a call written inside its reasoning is moved out of it when the
        turn is shown to the model again (not where reasoning is a message of its own).
    supersedes: families whose detection markers this family's templates also contain.
    fallback: detected only when no other family's markers are in the template (the
        `<tool_call>` families: other families' templates write that tag too).
    call_id: the id Prism gives a call the model wrote without one, from the reply's random
        prefix and the call's index, in the form the family's template accepts when the call
        comes back in the history (None: `call_PREFIXINDEX`). A call that carries the model's
        own id (Kimi's `functions.NAME:IDX`, Mistral's `[CALL_ID]`) keeps it.
    tag_forms: regular expressions of its whole tags that carry a name (`<invoke name="f">`),
        for the raw view, whose special tokens alone would leave them half coloured.
    format: its call syntax as data (engine/parse/shapes/record.py `CallFormat`) where a shape
        engine makes its reader, writer and grammar; None where the family reads its own.
    """

    name: str
    models: str
    markers: Markers
    match_opener: Callable[[str, int], Any]
    call_parser: type
    writer: Writer
    detect: tuple[str, ...] = ()
    stops: tuple[str, ...] = ()
    never_stops: tuple[str, ...] = ()
    preserved_tokens: tuple[str, ...] = ()
    thinking: bool | None = False
    pack: str | None = None
    grammar: CallGrammar | None = None
    repairs_history: bool = True
    supersedes: tuple[str, ...] = ()
    fallback: bool = False
    call_id: Callable[[str, int], str] | None = None
    tag_forms: tuple[str, ...] = ()
    format: Any = None
    module: str = field(default="", compare=False)

    @property
    def reasoning(self) -> tuple[str, str] | None:
        """(opener, closer) of its reasoning, None when it has none."""
        m = self.markers
        return (m.think_open, m.think_close) if m.think_open and m.think_close else None

    def start_state(self, prompt: str) -> str:
        """'reasoning' when the rendered prompt ends inside the family's open reasoning (the
        template opened it for the model), else 'content'. Trailing whitespace is ignored."""
        pair = self.reasoning
        if pair is None:
            return "content"
        opener, closer = pair
        text = prompt.rstrip()
        opened = text.rfind(opener)
        if opened == -1:
            return "content"
        # The closer is searched only after the opener: Harmony's `<|end|>` closes every message.
        return "content" if text.find(closer, opened + len(opener)) != -1 else "reasoning"


def think_writer(call: Callable[[ToolCall, int], str], **kw: Any) -> Writer:
    """A writer whose reasoning is a `<think>` block, as the `<think>` families write it."""
    return Writer(call, reasoning_open=THINK_OPEN + "\n",
                  reasoning_close="\n" + THINK_CLOSE + "\n\n", **kw)


_REGISTRY: dict[str, Family] = {}


def register(family: Family) -> Family:
    """Adds a family (each module registers its own, once, at import)."""
    if family.name in _REGISTRY or family.name == "auto":
        raise ValueError(f"family {family.name!r} registered twice")
    _REGISTRY[family.name] = family
    return family


# Families made at run time from a template's record (engine/chat/probe_check.py): found by
# name like the others, never listed (`families()`, detection, the command line's choices and
# the manual list what is written here, not what one template happened to show).
_DERIVED: dict[str, Family] = {}


def register_derived(family: Family) -> Family:
    """Adds a family derived from a template; the one already held under its name, if any
    (a derived name is a digest of its record, so the same name is the same family)."""
    if family.name in _REGISTRY or family.name == "auto":
        raise ValueError(f"derived family {family.name!r} names a written family")
    return _DERIVED.setdefault(family.name, family)


def get(name: str) -> Family | None:
    """The family of that name (written or derived), None for `auto` or an unknown name."""
    return _REGISTRY.get(name) or _DERIVED.get(name)


def known(name: str) -> bool:
    """Whether the parser can read `name`: `auto`, a written family or a derived one."""
    return name == "auto" or get(name) is not None


def families() -> tuple[Family, ...]:
    """Every registered family, in registration order."""
    return tuple(_REGISTRY.values())


def detect_order(fams: Iterable[Family] | None = None) -> tuple[Family, ...]:
    """Families in the order detection tries them: each before every family it supersedes,
    otherwise registration order (a stable topological sort; a cycle is a bug: ValueError);
    the fallback families after all the others."""
    fams = tuple(_REGISTRY.values() if fams is None else fams)
    names = {f.name for f in fams}
    before: dict[str, set[str]] = {f.name: set() for f in fams}  # name -> who must come first
    for f in fams:
        for other in f.supersedes:
            if other in names:
                before[other].add(f.name)
    out: list[Family] = []
    placed: set[str] = set()
    while len(out) < len(fams):
        for f in fams:
            if f.name not in placed and before[f.name] <= placed:
                out.append(f)
                placed.add(f.name)
                break
        else:
            raise ValueError("families supersede each other in a cycle")
    return tuple(f for f in out if not f.fallback) + tuple(f for f in out if f.fallback)
