"""What an upstream's own parser made of its output, turned back into text Prism can re-read.

Owns the readers of the three reply shapes (`ChatReader`: OpenAI chat; `MessagesReader`:
Anthropic messages; `ResponsesReader`: OpenAI Responses; each takes SSE events or a whole JSON
body), `Synth`, which writes what they find as one raw output in the pack's syntax, and
`LeakWatch`, the parser wrapper that flags what the upstream's parser missed. Used by
app/api/tap.py on the asyncio loop's thread; no I/O here.

The raw output is rebuilt as the model would have written it: reasoning inside `<think>` ...
`</think>`, then the content, then each structured call in the pack's call syntax (Hermes JSON
or Qwen XML). Fed token by token through the run's ordinary pipeline, it gives the window its
panes, the recorder its tokens and the metrics their counts, exactly as for a local run. Where
the *upstream's own* text (its reasoning or content, not the markup Synth wrote) holds a call
or a think tag, Prism's parser finds it, and `LeakWatch` adds an `upstream_leak` anomaly there:
the upstream's parser let markup through, or returned a call as text.
"""

from __future__ import annotations

import bisect
import json
from typing import Any

from engine.parse.events import ANOMALY, MARKUP, STRAY_THINK_END, TOOL_CALL, UPSTREAM_LEAK, Event


class Synth:
    """Builds the raw output from channel deltas; `pieces()` hands out what is new."""

    def __init__(self, dialect: str, start: str) -> None:
        self.dialect = dialect
        self.state = start  # "reasoning" | "content": where the text written so far stands
        self.text = ""
        self._given = 0
        self._theirs: list[tuple[int, int]] = []  # spans of the upstream's own text

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
        if self.state != "reasoning" and not self.text:
            self._ours("<think>\n")  # the model opened its own thinking
            self.state = "reasoning"
        # Reasoning after the answer began is out of order: it stays where it came, as text.
        self._their(text)

    def _end_reasoning(self) -> None:
        if self.state == "reasoning":
            self._ours("\n</think>\n\n")
            self.state = "content"

    def content(self, text: str) -> None:
        if text:
            self._end_reasoning()
            self._their(text)

    def call(self, name: str, arguments: Any) -> None:
        self._end_reasoning()
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments) if arguments.strip() else {}
            except ValueError:
                arguments = {"_raw": arguments}  # the upstream sent arguments that are not JSON
        if self.text and not self.text.endswith("\n"):
            self._ours("\n")
        self._ours(format_call(self.dialect, name, arguments))

    def pieces(self) -> str:
        """The text added since the last call."""
        new, self._given = self.text[self._given:], len(self.text)
        return new

    def theirs(self, span: tuple[int, int]) -> bool:
        """Whether a span of the raw output overlaps the upstream's own text."""
        i = bisect.bisect_right(self._theirs, (span[0], 1 << 62)) - 1
        for a, b in self._theirs[max(i, 0):]:
            if a >= span[1]:
                return False
            if b > span[0] and a < span[1]:
                return True
        return False


def format_call(dialect: str, name: str, arguments: Any) -> str:
    if dialect == "qwen-xml" and isinstance(arguments, dict):
        params = "".join(
            f"<parameter={k}>\n{v if isinstance(v, str) else json.dumps(v)}\n</parameter>\n"
            for k, v in arguments.items())
        return f"<tool_call>\n<function={name}>\n{params}</function>\n</tool_call>"
    body = json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False)
    return f"<tool_call>\n{body}\n</tool_call>"


class LeakWatch:
    """Wraps a run's OutputParser (same feed/finish/state) and adds an `upstream_leak`
    anomaly where the parser found a call or a think tag inside the upstream's own text."""

    def __init__(self, parser: Any, synth: Synth) -> None:
        self.parser = parser
        self.synth = synth

    @property
    def state(self) -> str:
        return self.parser.state

    def __getattr__(self, name: str) -> Any:  # anything else the pipeline or GUI reads
        return getattr(self.parser, name)

    def feed(self, text: str) -> list[Event]:
        return self._watch(self.parser.feed(text))

    def finish(self, *args: Any) -> list[Event]:
        return self._watch(self.parser.finish(*args))

    def _watch(self, evs: list[Event]) -> list[Event]:
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
