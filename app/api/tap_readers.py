"""What an upstream's own parser made of its output, turned back into text Prism can re-read.

Owns the readers of the three reply shapes (`ChatReader`: OpenAI chat; `MessagesReader`:
Anthropic messages; `ResponsesReader`: OpenAI Responses; each takes SSE events or a whole JSON
body), `Synth`, which writes what they find as one raw output in the pack's syntax, and
`LeakWatch`, the event filter that flags what the upstream's parser missed. Used by
app/api/tap.py on the asyncio loop's thread; no I/O here.

The raw output is rebuilt as the model would have written it, by the pack family's own writer
(engine/parse/families/registry.py; `auto` writes as Hermes JSON): the reasoning in the
family's reasoning block, then the content as the family opens its answer, then the structured
calls in the family's call syntax, written together (one section where the family frames a
list of calls) when the reply ends or text follows them. Fed token by token through the run's
ordinary pipeline, it gives the window its panes, the recorder its tokens and the metrics
their counts, exactly as for a local run. Where the *upstream's own* text (its reasoning or
content, not the markup Synth wrote) holds a call or a think tag, Prism's parser finds it, and
`LeakWatch` adds an `upstream_leak` anomaly there: the upstream's parser let markup through, or
returned a call as text.
"""

from __future__ import annotations

import bisect
import json
from typing import Any

from engine.parse import families
from engine.parse.events import (
    ANOMALY,
    MARKUP,
    STRAY_THINK_END,
    TOOL_CALL,
    UPSTREAM_LEAK,
    Event,
    ToolCall,
)
from engine.parse.families.registry import Writer


class Synth:
    """Builds the raw output from channel deltas in the pack family's own syntax (its
    registry writer; `auto` writes as Hermes JSON); `pieces()` hands out what is new.

    Reasoning is opened once (unless the prompt opened it), its deltas written as they come,
    and closed when the answer or a call begins. Calls are held and written together with the
    writer's `write_calls` (one section for the families that frame a list of calls) when the
    reply ends (`end()`) or text follows them."""

    def __init__(self, family: str, start: str) -> None:
        self.family = family
        fam = families.get(family) or families.get("hermes-json")
        self.writer: Writer = fam.writer
        self.state = start  # "reasoning" | "content": where the text written so far stands
        self.text = ""
        self._given = 0
        self._theirs: list[tuple[int, int]] = []  # spans of the upstream's own text
        self._reasoned = False  # a reasoning block was closed: the answer opens after it
        self._last = ""  # what was written last: "" (nothing), "answer" or "calls"
        self._calls: list[ToolCall] = []  # held until the reply ends or text follows
        self._n_calls = 0  # calls written so far (the index of the next)

    def _ours(self, markup: str) -> None:
        self.text += markup

    def _their(self, text: str) -> None:
        if not text:
            return
        start = len(self.text)
        self.text += text
        if self._theirs and self._theirs[-1][1] == start:
            self._theirs[-1] = (self._theirs[-1][0], len(self.text))
        else:
            self._theirs.append((start, len(self.text)))

    def reasoning(self, text: str) -> None:
        if not text:
            return
        w = self.writer
        if (self.state != "reasoning" and not self.text and not self._calls
                and w.reasoning_close):
            self._ours(w.reasoning_open)  # the model opened its own thinking
            self.state = "reasoning"
        if self.state == "reasoning":
            self._their(text)
        else:
            # Reasoning after the answer began (or for a family without reasoning) is out of
            # order: it stays where it came, as text.
            self._answer(text)

    def _end_reasoning(self) -> None:
        if self.state == "reasoning":
            self._ours(self.writer.reasoning_close)
            self.state = "content"
            self._reasoned = True

    def content(self, text: str) -> None:
        if text:
            self._end_reasoning()
            self._answer(text)

    def _answer(self, text: str) -> None:
        """The upstream's text in the answer: opened as the family opens it."""
        w = self.writer
        if self._calls:
            self._write_calls()
        if self._last == "calls":
            # Text after calls: a new message where the family frames its answer (Harmony),
            # else a new line.
            self._ours(w.calls_sep + w.answer_open if w.answer_open else "\n")
        elif self._last != "answer" and self._reasoned:
            self._ours(w.answer_open)
        self._last = "answer"
        self._their(text)

    def call(self, name: str, arguments: Any) -> None:
        self._end_reasoning()
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments) if arguments.strip() else {}
            except ValueError:
                arguments = {"_raw": arguments}  # the upstream sent arguments that are not JSON
        if not isinstance(arguments, dict):
            arguments = {"_raw": json.dumps(arguments)}  # JSON, but not an object
        index = self._n_calls + len(self._calls)
        self._calls.append(ToolCall(f"call_{index}", name, arguments, index))

    def _write_calls(self) -> None:
        w = self.writer
        if self._last == "answer" and not (w.before_calls == "\n" and self.text.endswith("\n")):
            self._ours(w.before_calls)
        self._ours(w.write_calls(self._calls, self._n_calls))
        self._n_calls += len(self._calls)
        self._calls = []
        self._last = "calls"

    def end(self) -> None:
        """The reply is over: write the calls still held."""
        if self._calls:
            self._write_calls()

    def pieces(self) -> str:
        """The text added since the last call."""
        new, self._given = self.text[self._given:], len(self.text)
        return new

    def theirs(self, span: tuple[int, int]) -> bool:
        """Whether a span of the raw output overlaps the upstream's own text. An empty span
        (a call the parser closed only where the next text, or the output's end, showed it
        was over) stands for the character before it."""
        if span[0] == span[1]:
            span = (span[0] - 1, span[1]) if span[0] > 0 else span
        i = bisect.bisect_right(self._theirs, (span[0], 1 << 62)) - 1
        for a, b in self._theirs[max(i, 0):]:
            if a >= span[1]:
                return False
            if b > span[0] and a < span[1]:
                return True
        return False


class LeakWatch:
    """An event filter (engine/parse/filters.py) on a tapped run: adds an `upstream_leak`
    anomaly where the parser found a call or a think tag inside the upstream's own text.
    Added first in the run's pipeline (`TokenPipeline.add_filter(..., first=True)`), so it
    sees every call the parser found, before a policy (one call per reply) drops any."""

    def __init__(self, synth: Synth) -> None:
        self.synth = synth

    def finish(self) -> list[Event]:
        return []  # holds nothing back

    def feed(self, evs: list[Event]) -> list[Event]:
        out: list[Event] = []
        for ev in evs:
            out.append(ev)
            leaked = None
            if ev.kind == TOOL_CALL and self.synth.theirs(ev.span):
                leaked = "a call the upstream returned as text"
            elif _think_tag(ev) and self.synth.theirs(ev.span):
                leaked = f"{ev.text.strip()} left in the upstream's text"
            if leaked:
                out.append(Event(ANOMALY, leaked, (ev.span[1], ev.span[1]),
                                 anomaly=UPSTREAM_LEAK))
        return out


def _think_tag(ev: Event) -> bool:
    """A think tag the parser consumed, or a stray `</think>` it dropped."""
    if ev.kind == MARKUP:
        return "think>" in ev.text
    return ev.kind == ANOMALY and ev.anomaly == STRAY_THINK_END


# --- readers: one per reply shape ---------------------------------------------------------------


class Reader:
    """Feeds a Synth from one reply. `event(obj)` per SSE data object, `whole(obj)` for a
    non-streamed body; `reason` is "stop" or "length" once known."""

    def __init__(self, synth: Synth) -> None:
        self.synth = synth
        self.reason = "stop"
        self.error: str | None = None

    def event(self, obj: dict) -> None:
        raise NotImplementedError

    def whole(self, obj: dict) -> None:
        raise NotImplementedError

    def end(self) -> None:
        """The reply is over: write anything still held (calls whose arguments streamed)."""
        self.synth.end()


class ChatReader(Reader):
    def __init__(self, synth: Synth) -> None:
        super().__init__(synth)
        self._calls: dict[int, list[str]] = {}  # index -> [name, arguments so far]

    def event(self, obj: dict) -> None:
        if "error" in obj:
            self.error = json.dumps(obj["error"])[:500]
        for choice in obj.get("choices") or ():
            self._message(choice.get("delta") or {}, streamed=True)
            self._finish(choice.get("finish_reason"))

    def whole(self, obj: dict) -> None:
        for choice in (obj.get("choices") or ())[:1]:
            self._message(choice.get("message") or {}, streamed=False)
            self._finish(choice.get("finish_reason"))
        self.end()

    def _finish(self, reason: str | None) -> None:
        if reason:
            self.reason = "length" if reason == "length" else "stop"

    def _message(self, m: dict, streamed: bool) -> None:
        self.synth.reasoning(m.get("reasoning_content") or m.get("reasoning") or "")
        self.synth.content(m.get("content") or "")
        for i, tc in enumerate(m.get("tool_calls") or ()):
            fn = tc.get("function") or {}
            idx = tc.get("index", i) if streamed else i
            call = self._calls.setdefault(idx, ["", ""])
            call[0] = call[0] or fn.get("name") or ""
            call[1] += fn.get("arguments") or ""

    def end(self) -> None:
        for idx in sorted(self._calls):
            name, args = self._calls[idx]
            self.synth.call(name, args)
        self._calls.clear()
        super().end()


class MessagesReader(Reader):
    def __init__(self, synth: Synth) -> None:
        super().__init__(synth)
        self._tools: dict[int, list[str]] = {}

    def event(self, obj: dict) -> None:
        kind = obj.get("type")
        if kind == "content_block_start":
            block = obj.get("content_block") or {}
            if block.get("type") == "tool_use":
                self._tools[obj.get("index", 0)] = [block.get("name") or "", ""]
            else:
                self._block(block)
        elif kind == "content_block_delta":
            d = obj.get("delta") or {}
            if d.get("type") == "thinking_delta":
                self.synth.reasoning(d.get("thinking") or "")
            elif d.get("type") == "text_delta":
                self.synth.content(d.get("text") or "")
            elif d.get("type") == "input_json_delta" and obj.get("index", 0) in self._tools:
                self._tools[obj.get("index", 0)][1] += d.get("partial_json") or ""
        elif kind == "content_block_stop" and obj.get("index", 0) in self._tools:
            name, args = self._tools.pop(obj.get("index", 0))
            self.synth.call(name, args)
        elif kind == "message_delta":
            self._stop((obj.get("delta") or {}).get("stop_reason"))
        elif kind == "error":
            self.error = json.dumps(obj.get("error"))[:500]

    def whole(self, obj: dict) -> None:
        for block in obj.get("content") or ():
            if block.get("type") == "tool_use":
                self.synth.call(block.get("name") or "", block.get("input") or {})
            else:
                self._block(block)
        self._stop(obj.get("stop_reason"))

    def _block(self, block: dict) -> None:
        if block.get("type") == "thinking":
            self.synth.reasoning(block.get("thinking") or "")
        elif block.get("type") == "text":
            self.synth.content(block.get("text") or "")

    def _stop(self, reason: str | None) -> None:
        if reason:
            self.reason = "length" if reason == "max_tokens" else "stop"


class ResponsesReader(Reader):
    def event(self, obj: dict) -> None:
        kind = obj.get("type") or ""
        if kind in ("response.reasoning_text.delta", "response.reasoning.delta"):
            self.synth.reasoning(obj.get("delta") or "")
        elif kind == "response.output_text.delta":
            self.synth.content(obj.get("delta") or "")
        elif kind == "response.output_item.done":
            item = obj.get("item") or {}
            if item.get("type") == "function_call":
                self.synth.call(item.get("name") or "", item.get("arguments") or "")
        elif kind in ("response.completed", "response.incomplete"):
            self._status(obj.get("response") or {})
        elif kind in ("error", "response.failed"):
            self.error = json.dumps(obj)[:500]

    def whole(self, obj: dict) -> None:
        for item in obj.get("output") or ():
            kind = item.get("type")
            if kind == "reasoning":
                parts = (item.get("content") or []) + (item.get("summary") or [])
                self.synth.reasoning("".join(p.get("text") or "" for p in parts))
            elif kind == "message":
                self.synth.content("".join(p.get("text") or ""
                                           for p in item.get("content") or ()))
            elif kind == "function_call":
                self.synth.call(item.get("name") or "", item.get("arguments") or "")
        self._status(obj)

    def _status(self, response: dict) -> None:
        details = response.get("incomplete_details") or {}
        if details.get("reason") == "max_output_tokens":
            self.reason = "length"


READERS: dict[str, type[Reader]] = {
    "/v1/chat/completions": ChatReader,
    "/v1/messages": MessagesReader,
    "/v1/responses": ResponsesReader,
}
