"""A derived call format checked before it is used, and the family it comes to.

Owns `Verdict` (what the probe decided: the family to read a template's output with, or why
the format is unknown, and what to say about it), `verdict(template)`, `self_test` (a call the
template rendered must read back exactly, name and arguments, at every chunking) and
`derived_family` (a `Family` built from a derived record with the shape engines, registered
under `derived:<shape>` so the parser, the writer and the forced-call grammar can find it).
A family whose reader reads the template's calls, and whose writer's calls the derived record
reads, is used as it is (its own extras: repairs, stops); else the derived family. Pure but for
the registration; runs once per template text (cached) at startup, in `prism probe` and tests.
"""

from __future__ import annotations

import functools
import hashlib
import random
from dataclasses import dataclass

from engine.chat.detect import PREFIX
from engine.chat.probe import Probe, probe
from engine.parse import families
from engine.parse.events import CONTENT, ToolCall, result_of
from engine.parse.families import registry
from engine.parse.parser import OutputParser
from engine.parse.shapes.build import shape_family
from engine.parse.shapes.record import CallFormat

_CHUNKINGS = 3  # random chunkings per text, besides whole and one character at a time


@dataclass(frozen=True, slots=True)
class Verdict:
    """What the probe decided for one template.

    family: the family to read with (a registered one or a derived one); None when the probe
        decides nothing (no calls rendered, or the format is unknown).
    probe: the probe's findings.
    passed: the derived record read every rendered call back exactly (self-test).
    failure: why the self-test failed ("" when it passed or did not run).
    agrees: the family the template's markers name (`claimed`) reads its rendered calls.
    claimed: the family the template's markers name ("" when none).
    note: one line for the start line where the probe and the markers disagree ("" else).
    """

    family: registry.Family | None
    probe: Probe
    passed: bool = False
    failure: str = ""
    agrees: bool = False
    claimed: str = ""
    note: str = ""

    @property
    def derived(self) -> bool:
        return self.family is not None and self.family.name.startswith(PREFIX)

    def why_unknown(self) -> str:
        """Why no format was derived (the probe's reason, else the self-test's)."""
        return self.probe.why or self.failure


def _calls(text: str, family: str, chunks: list[int] | None, stream: bool) -> tuple:
    parser = OutputParser(start=CONTENT, family=family, tools=_tool_list(), id_prefix="",
                          stream_tools=stream)
    events = []
    if chunks is None:
        events += parser.feed(text)
    else:
        i = 0
        for n in chunks:
            events += parser.feed(text[i:i + n])
            i += n
    events += parser.finish()
    res = result_of(events)
    return tuple((c.name, c.arguments) for c in res.tool_calls), res.content.strip()


def _tool_list() -> list[dict]:
    from engine.chat.probe import TOOLS

    return [dict(t) for t in TOOLS]


def _chunkings(text: str) -> list[tuple[str, list[int] | None]]:
    out: list[tuple[str, list[int] | None]] = [("whole", None), ("per character",
                                                                 [1] * len(text))]
    for seed in range(_CHUNKINGS):
        rng, sizes, total = random.Random(seed), [], 0
        while total < len(text):
            sizes.append(rng.randint(1, 9))
            total += sizes[-1]
        out.append((f"random chunks #{seed}", sizes))
    return out


def reads(family: str, text: str, expected: tuple) -> str:
    """"" when `family` reads `text` as exactly the calls `expected` ((name, arguments), …)
    and nothing else, at every chunking, stream_tools off and on; else what went wrong."""
    want = tuple((n, dict(a)) for n, a in expected)
    for how, chunks in _chunkings(text):
        for stream in (False, True):
            try:
                got, left = _calls(text, family, chunks, stream)
            except Exception as exc:  # a reader that raises is a failed test, said as such
                return f"{how}: the reader failed ({type(exc).__name__}: {exc})"
            if got != want or left:
                return (f"{how}{', streamed' if stream else ''}: read {list(got)} and text "
                        f"{left[:60]!r}, not {list(want)}")
    return ""


def self_test(family: str, found: Probe) -> str:
    """"" when `family` reads every call text the template rendered exactly; else why."""
    for label, calls, text in found.calls:
        if not text:
            continue
        why = reads(family, text, calls)
        if why:
            return f"{label}: {why}"
    return ""


def _writes_back(fam: registry.Family, family: str, found: Probe) -> bool:
    """Whether `family` reads `fam`'s writer's calls (the probe's) as `fam` writes them."""
    for _label, calls, text in found.calls:
        if not text:
            continue
        tcs = [ToolCall(f"call_{i}", n, dict(a), i) for i, (n, a) in enumerate(calls)]
        if reads(family, fam.writer.write_calls(tcs), calls):
            return False
    return True


def derived_name(fmt: CallFormat, reasoning: tuple[str, str] | None) -> str:
    """`derived:<shape>`, with a short digest of the record when another derived record of
    that shape holds the plain name (two templates probed in one process)."""
    plain = PREFIX + fmt.shape
    held = registry.get(plain)
    if held is None or (held.format == fmt and held.reasoning == reasoning):
        return plain
    digest = hashlib.sha256(repr((fmt, reasoning)).encode()).hexdigest()[:6]
    return f"{plain}-{digest}"


def derived_family(fmt: CallFormat, reasoning: tuple[str, str] | None) -> registry.Family:
    """The family of a derived record, registered once (the parser finds families by name)."""
    name = derived_name(fmt, reasoning)
    held = registry.get(name)
    if held is not None:
        return held
    tokens = tuple(t.strip() for t in (fmt.section, fmt.section_end) if t.strip())
    fam = shape_family(fmt, name=name, models=f"derived from a chat template: {fmt.describe()}",
                       reasoning=reasoning, preserved_tokens=tokens, never_stops=tokens,
                       thinking=None, repairs_history=reasoning is not None)
    _install(fam)
    return fam


def _install(fam: registry.Family) -> None:
    """Registers `fam` where the parser and the grammars find families by name, outside the
    lists of written families."""
    registry.register_derived(fam)


def _same(fam: registry.Family, fmt: CallFormat) -> bool:
    """Whether a family's record is the derived one, markup whitespace aside."""
    own = fam.format
    if own is None or own.shape != fmt.shape:
        return False
    fields = ("section", "section_end", "call", "call_end", "param", "key_end", "value_end")
    return all(getattr(own, f).strip() == getattr(fmt, f).strip() for f in fields)


def _agreeing(found: Probe, first: str, own: registry.Family | None) -> registry.Family | None:
    """The first family (the claimed one first, then detection's order) that reads the
    template's calls and whose writer's calls the derived family `own` reads back (its record
    equal to the derived one, where `own` failed its self-test)."""
    order = [f for f in families.detect_order() if not f.name.startswith(PREFIX)]
    order.sort(key=lambda f: f.name != first)
    for fam in order:
        if self_test(fam.name, found):
            continue
        if _same(fam, found.format) or (own is not None and _writes_back(fam, own.name, found)):
            return fam
    return None


@functools.lru_cache(maxsize=128)
def verdict(source: str, claimed: str = "", tool_source: str = "") -> Verdict:
    """The probe's decision for template `source`, whose markers name `claimed` ("" none)."""
    found = probe(source, tool_source)
    agrees = bool(claimed) and any(t for _, _, t in found.calls) \
        and not self_test(claimed, found)
    if found.format is None:
        return Verdict(None, found, agrees=agrees, claimed=claimed)
    own = derived_family(found.format, found.reasoning)
    failure = self_test(own.name, found)
    # The claimed family reading the template's own calls confirms it (its extras: repairs).
    fam = registry.get(claimed) if agrees else _agreeing(found, claimed,
                                                         None if failure else own)
    if fam is None and failure:
        # Never read wrongly: the derived record does not read the template's own calls.
        return Verdict(None, found, failure=failure, agrees=agrees, claimed=claimed)
    fam = fam or own
    note = ""
    if claimed and fam.name != claimed:
        note = (f"the template's markers name {claimed}, but the calls it renders are "
                f"{found.format.describe()}: read as {fam.name}")
    return Verdict(fam, found, passed=not failure, failure=failure, agrees=agrees,
                   claimed=claimed, note=note)


__all__ = ["PREFIX", "Verdict", "derived_family", "reads", "self_test", "verdict"]
