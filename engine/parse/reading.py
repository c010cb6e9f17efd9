"""How one output is read: `Reading`, the parser's settings and the request's policy, as one value.

Owns `Reading`. Reading an output takes more than the text: where the parser starts, the
model family's syntax, the tools the request declared (and whether it declared any: then a call
to another is `unknown_tool`), whether calls stream, and the request's policy on what is
delivered (one call per reply; calls as text for a client that declared no tools). The service
builds one per request (engine/service.py), the recording stores it with the request
(engine/record/recording.py), and replay, playback, re-parse and fixture export read the output
again from it (inspector/, widgets/), so none of them rebuilds it field by field and they cannot
drift apart (docs/design.md, sections 4 and 6).

Pure data, standard library only; any thread may build or read one. `parser()` and `filters()`
make new objects, owned by the thread that feeds them.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.parse.events import REASONING
from engine.parse.filters import CallsAsText, EventFilter, FirstCallOnly
from engine.parse.parser import OutputParser


@dataclass(frozen=True, slots=True)
class Reading:
    """How one output is read.

    start: "reasoning" or "content", where the rendered prompt left the model.
    family: the model family the parser reads (engine/parse/families): its output syntax.
    tools: the declared tools, OpenAI-style dicts (schema typing of call arguments).
    tools_declared: the request said which tools it offers, even none (a server request); a
        call to any other is then `unknown_tool`. False when nothing is known (`prism parse`,
        a plain text file).
    stream_tools: calls stream `tool_start` / `tool_args` before the whole `tool_call`.
    one_call: one call per reply (parallel calls off): later calls are not delivered
        (`FirstCallOnly`); part of the run's own events, so of what the window shows.
    calls_as_text: the client declared no tools and is answered with any call as text
        (`CallsAsText`); its reply only, the run and the window keep the call.

    The defaults are the parser's own (`OutputParser()`).
    """

    start: str = REASONING
    family: str = "auto"
    tools: tuple[dict, ...] = ()
    tools_declared: bool = False
    stream_tools: bool = False
    one_call: bool = False
    calls_as_text: bool = False

    def __post_init__(self) -> None:
        # Callers hand over a request's tuple or a recording's list: always a tuple here, so
        # two readings of the same request compare equal.
        if not isinstance(self.tools, tuple):
            object.__setattr__(self, "tools", tuple(self.tools))

    def parser(self, id_prefix: str | None = None) -> OutputParser:
        """A new parser for one output read this way. `id_prefix` fixes the call ids (a
        re-parse and a fixture must not differ by them); None draws random ones."""
        return OutputParser(start=self.start, family=self.family, tools=self.tools,
                            stream_tools=self.stream_tools, id_prefix=id_prefix,
                            tools_declared=self.tools_declared)

    def filters(self) -> list[EventFilter]:
        """New filters for the run's own events, in order, after the parser: what the run,
        its result, the metrics, the recording and the window see."""
        return [FirstCallOnly()] if self.one_call else []

    def reply_filters(self) -> list[EventFilter]:
        """New filters for the client's reply, on top of the run's events: a client that
        declared no tools gets any call as text (app/api/runs.py)."""
        return [CallsAsText()] if self.calls_as_text else []

    def to_dict(self) -> dict:
        """Plain JSON-able data, for a recording's request record and an exported fixture."""
        return {
            "start": self.start,
            "family": self.family,
            "tools": list(self.tools),
            "tools_declared": self.tools_declared,
            "stream_tools": self.stream_tools,
            "one_call": self.one_call,
            "calls_as_text": self.calls_as_text,
        }

    @classmethod
    def from_dict(cls, d: dict) -> Reading:
        """Inverse of `to_dict`. A missing key takes its default (a file written before the
        key existed, or by hand); `dialect` is read as `family` (fixtures exported before
        readings named their settings so)."""
        family = d.get("family", d.get("dialect"))
        return cls(
            start=str(d.get("start", REASONING)),
            family=str(family) if family else "auto",
            tools=tuple(dict(t) for t in d.get("tools") or ()),
            tools_declared=bool(d.get("tools_declared", False)),
            stream_tools=bool(d.get("stream_tools", False)),
            one_call=bool(d.get("one_call", False)),
            calls_as_text=bool(d.get("calls_as_text", False)),
        )
