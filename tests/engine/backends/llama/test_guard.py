"""Guarded calls on the real default model (engine/backends/llama/guard.py, through
LlamaEngine and the Service): once the parser has a real call open, the rest of it follows
one call's grammar in the family's syntax, and sampling is free again once the call is whole.

How a call is opened here: the default model (SmolLM2-135M) writes Hermes calls after a few
example turns (the service tests), and writes any family's opener when a grammar of the
job's own forces just that opener and leaves the rest free (`[^\\x00]*`): the guard then has
to produce the name and the schema-valid arguments in that family's syntax by itself. The
tool takes only two enums, so a guarded call ends within a few dozen tokens.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path

import jsonschema
import pytest

from engine.backends.base import Job, Token
from engine.backends.llama.engine import LlamaEngine
from engine.chat.packs import resolve_pack
from engine.chat.request import ChatRequest, Message, Sampling
from engine.grammar.tools import FORMATS, CallGuard, forced_call
from engine.metrics import Metrics
from engine.parse.events import (
    GUIDED_TOKEN,
    MALFORMED_CALL,
    TOOL_CALL,
    UNFINISHED_CALL,
    ToolCall,
    result_of,
)
from engine.parse.families import REGISTRY
from engine.parse.parser import OutputParser
from engine.service import Service
from tests.engine.backends.llama.test_batch import same_or_near_tie
from tests.engine.backends.llama.test_engine import chatml

pytestmark = pytest.mark.model

SCHEMA = {"type": "object",
          # An enum, not a range: llama-cpp-python's schema converter ignores minimum/maximum
          # (README, "Guarded calls"), and this model loves sixteen-digit numbers.
          "properties": {"hour": {"type": "integer", "enum": [6, 7, 8]},
                         "mode": {"type": "string", "enum": ["loud", "quiet"]}},
          "required": ["hour", "mode"]}
TOOLS = ({"type": "function", "function": {"name": "set_alarm", "description": "Set an alarm",
                                           "parameters": SCHEMA}},)
FAMILIES = sorted(n for n in FORMATS if n != "auto")


@pytest.fixture(scope="module")
def engine(default_model: Path) -> Iterator[LlamaEngine]:
    eng = LlamaEngine(default_model, n_ctx=2048, parallel=2, n_threads=1)
    assert eng.ready.wait(60) and eng.load_error is None
    yield eng
    eng.close()


def opener(family: str) -> str:
    """The shortest start of the family's own call text at which its parser has the call
    open (what the model must write before the guard takes over)."""
    text = REGISTRY[family].writer.write_call(ToolCall("c0", "set_alarm",
                                                        {"hour": 7, "mode": "loud"}, 0))
    parser = OutputParser(start="content", family=family, tools=TOOLS, tools_declared=True)
    for k, ch in enumerate(text):
        parser.feed(ch)
        if parser.state == "call":
            return text[:k + 1]
    raise AssertionError(f"{family}: its parser never opened its own call {text!r}")


def lead_for(family: str) -> str:
    """A little text, then the family's opener: what the model writes before the guard acts
    (the opener alone for the families whose calls must open the reply)."""
    lead = "Sure.\n" + opener(family)
    parser = OutputParser(start="content", family=family, tools=TOOLS, tools_declared=True)
    parser.feed(lead)
    return lead if parser.state == "call" else opener(family)


class Run:
    def __init__(self, family: str, prompt: str, lead: str, *, guard: bool = True,
                 start: str = "content", max_tokens: int = 300, top_logprobs: int = 0,
                 stop_at_call: bool = True) -> None:
        self.parser = OutputParser(start=start, family=family, tools=TOOLS,
                                   tools_declared=True)
        self.tokens: list[Token] = []
        self.events = []
        self.stop_at_call = stop_at_call
        self.done = threading.Event()
        g = CallGuard(forced_call(family, TOOLS, several=False), self.parser) if guard else None
        self.job = Job(prompt=prompt, max_tokens=max_tokens, sampling=Sampling(temperature=0.0),
                       grammar=f"root ::= {json.dumps(lead)} [^\\x00]*", guard=g,
                       top_logprobs=top_logprobs,
                       on_token=self._token, on_finish=lambda f: self.done.set())

    def _token(self, tok: Token) -> None:
        self.tokens.append(tok)
        evs = self.parser.feed(tok.text)
        self.events += evs
        if self.stop_at_call and any(e.kind == TOOL_CALL for e in evs):
            self.job.cancel()  # what follows the call is this tiny model's babble

    def wait(self):
        assert self.done.wait(180)
        self.events += self.parser.finish()
        return result_of(self.events, "stop")

    @property
    def text(self) -> str:
        return "".join(t.text for t in self.tokens)


@pytest.mark.parametrize("family", FAMILIES)
def test_a_call_opened_in_any_family_completes_valid_for_its_schema(engine, family):
    lead = lead_for(family)
    run = Run(family, chatml("Wake me at seven, loudly."), lead)
    engine.submit(run.job)
    result = run.wait()
    assert run.text.startswith(lead)
    assert result.tool_calls, f"{family}: no call read from {run.text!r}"
    call = result.tool_calls[0]
    assert call.name == "set_alarm"
    jsonschema.validate(call.arguments, SCHEMA)
    assert not (result.anomalies.get(UNFINISHED_CALL) or result.anomalies.get(MALFORMED_CALL))
    # The text before the call is the model's own (the newline before a tag is the tag's).
    assert result.content.startswith(lead[:lead.index(opener(family))].rstrip())


def test_a_call_opened_inside_reasoning_is_guarded_too(engine):
    lead = "I should set it.\n" + opener("hermes-json")
    run = Run("hermes-json", chatml("Wake me at seven.") + "<think>\n", lead, start="reasoning")
    engine.submit(run.job)
    result = run.wait()
    assert result.reasoning.startswith("I should set it.")
    assert result.tool_calls and result.tool_calls[0].name == "set_alarm"
    jsonschema.validate(result.tool_calls[0].arguments, SCHEMA)
    assert result.anomalies.get("implicit_reasoning_end") == 1


def test_without_the_guard_the_same_opening_is_left_to_the_model(engine):
    lead = "Sure.\n" + opener("hermes-json")
    free = Run("hermes-json", chatml("Wake me at seven, loudly."), lead, guard=False)
    guarded = Run("hermes-json", chatml("Wake me at seven, loudly."), lead)
    for r in (free, guarded):
        engine.submit(r.job)
        r.wait()
    assert not any(t.guided for t in free.tokens)
    first = next(i for i, t in enumerate(guarded.tokens) if t.guided is not None)
    # Up to the first token the guard changed, both wrote the same; there, the guarded run's
    # token is another than the model's own draw, which is what the free run took.
    assert [t.id for t in guarded.tokens[:first]] == [t.id for t in free.tokens[:first]]
    assert guarded.tokens[first].guided == free.tokens[first].text != guarded.tokens[first].text


def test_a_neighbour_in_the_batch_is_untouched_by_the_guard(engine):
    neighbour_prompt = chatml("Tell me about the moon.")
    kw = dict(guard=False, max_tokens=40, top_logprobs=5)
    alone = Run("hermes-json", neighbour_prompt, "The moon", **kw)
    engine.submit(alone.job)
    alone.wait()
    beside = Run("hermes-json", neighbour_prompt, "The moon", **kw)
    guarded = Run("hermes-json", chatml("Wake me at seven."), "Ok.\n" + opener("hermes-json"))
    engine.submit(guarded.job)
    engine.submit(beside.job)
    guarded.wait()
    beside.wait()
    assert any(t.guided for t in guarded.tokens)  # the guard did act beside it
    # A neighbour decodes as alone up to the documented near-tie rule (a batch of two sums in
    # another order: tests/engine/backends/llama/test_batch.py), never reading the guard's
    # grammar: a masked neighbour would part at once and by far.
    assert same_or_near_tie(alone.tokens, beside.tokens) >= 8


# -- through the service: a conversation that leads the model to call -------------------------

WEATHER = {"type": "object",
           "properties": {"city": {"type": "string"}, "days": {"type": "integer"},
                          "units": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
           "required": ["city", "days", "units"]}
WEATHER_TOOLS = ({"type": "function", "function": {
    "name": "get_weather", "description": "Weather forecast for a city", "parameters": WEATHER}},)


def turns(i: int, city: str, days: int, units: str) -> list[Message]:
    args = {"city": city, "days": days, "units": units}
    return [Message("user", f"Weather in {city} for {days} days?"),
            Message("assistant", "", tool_calls=({"id": f"c{i}", "type": "function",
                                                  "function": {"name": "get_weather",
                                                               "arguments": json.dumps(args)}},)),
            Message("tool", "Sunny.", tool_call_id=f"c{i}"),
            Message("assistant", f"It will be sunny in {city}.")]


HISTORY = turns(1, "Paris", 2, "celsius") + turns(2, "Boston", 3, "fahrenheit")


@pytest.fixture(scope="module")
def service(engine) -> Service:
    return Service(engine, resolve_pack("smollm2"), metrics=Metrics(engine))


def ask(service: Service, question: str, seed: int, **kw):
    req = ChatRequest(messages=(*HISTORY, Message("user", question)), tools=WEATHER_TOOLS,
                      sampling=Sampling(temperature=0.8, seed=seed), max_tokens=60, **kw)
    run = service.submit(req)
    for _ in run:
        pass
    return run


def test_the_service_guards_calls_under_auto_and_counts_what_it_changed(service):
    # Rome at seed 1: unguarded, this model writes "units": "miles" (measured); guarded, a
    # unit the schema allows, the change counted as guided tokens, not as anomalies.
    free = ask(service, "Weather in Rome for 4 days?", 1, guard_calls=False)
    assert free.result.anomalies.get("invalid_arguments") == 1
    before = service.metrics.snapshot()["totals"]["guided_tokens"]
    run = ask(service, "Weather in Rome for 4 days?", 1)
    (call,) = run.result.tool_calls
    jsonschema.validate(call.arguments, WEATHER)
    assert not run.result.anomalies.get("invalid_arguments")
    guided = [t for t in run.tokens if t.guided is not None]
    assert guided
    assert [e for e in run.events if e.kind == GUIDED_TOKEN] and not any(
        e.kind == "anomaly" and e.anomaly == GUIDED_TOKEN for e in run.events)
    assert service.metrics.snapshot()["totals"]["guided_tokens"] == before + len(guided)


def test_a_reply_without_a_call_is_not_touched(service):
    free = ask(service, "Weather in Rome for 4 days?", 2, guard_calls=False)
    run = ask(service, "Weather in Rome for 4 days?", 2)
    assert not free.result.tool_calls  # at seed 2 the model answers in text
    assert [t.id for t in run.tokens] == [t.id for t in free.tokens]
    assert not any(t.guided for t in run.tokens)
