"""The thinking budget (engine/chat/budget.py, engine/backends/llama/budget.py): every family's
close round-trips through its parser; on the real engine, the reasoning holds at most the
budget's tokens, the close is the family's, the answer follows, and the close is an event,
counted, recorded and named by the verdict."""

from __future__ import annotations

import pytest

from engine.chat.budget import EFFORT_BUDGETS, budget_of, close_text, effort_budget
from engine.chat.request import ChatRequest, Message, Sampling
from engine.metrics import Metrics
from engine.parse import families
from engine.parse.events import ANOMALY, REASONING_BUDGET, merge, result_of
from engine.parse.parser import OutputParser
from engine.pipeline import TokenPipeline
from engine.record.reader import read_session
from engine.record.recording import Recorder
from engine.record.verdict import ANSWERED, BUDGET_CLOSED, verdict_of
from engine.service import Service

REASONING = "Let me think about it. The user asks a question"
ANSWER = "The answer is four."


def _parse(family: str, text: str, *, whole: bool):
    parser = OutputParser("reasoning", family)
    if whole:
        evs = parser.feed(text) + parser.finish()
    else:  # streamed: one character at a time, the worst case for a marker split
        evs = [ev for ch in text for ev in parser.feed(ch)] + parser.finish()
    return result_of(merge(evs))


REASONING_FAMILIES = [f.name for f in families.families() if close_text(f.name)]


def test_every_family_with_reasoning_markers_has_a_close():
    with_markers = [f.name for f in families.families() if f.reasoning is not None]
    assert with_markers and set(with_markers) == set(REASONING_FAMILIES)


@pytest.mark.parametrize("family", REASONING_FAMILIES)
@pytest.mark.parametrize("whole", [True, False], ids=["whole", "streamed"])
def test_the_writers_close_is_read_back_as_a_closed_reasoning(family, whole):
    """The prompt opened the reasoning, the budget's close ended it, the answer followed."""
    text = REASONING + close_text(family) + ANSWER
    res = _parse(family, text, whole=whole)
    assert res.reasoning.strip() == REASONING
    assert res.content.strip() == ANSWER
    assert not any(res.anomalies.values()), res.anomalies


def test_a_close_forced_at_once_leaves_no_reasoning():
    for family in REASONING_FAMILIES:
        res = _parse(family, close_text(family) + ANSWER, whole=True)
        assert res.reasoning.strip() == "" and res.content.strip() == ANSWER, family


def test_families_without_reasoning_have_nothing_to_close():
    plain = [f.name for f in families.families() if f.reasoning is None]
    assert all(close_text(name) == "" for name in plain)


def test_efforts_and_defaults():
    assert effort_budget("none") == 0 and effort_budget("low") == EFFORT_BUDGETS["low"] == 1024
    assert effort_budget("medium") == 4096 and effort_budget("high") is None
    assert effort_budget(None) is None
    ask = ChatRequest(messages=(Message("user", "hi"),))
    assert budget_of(ask, None) is None and budget_of(ask, 7) == 7 and budget_of(ask, -1) is None
    own = ChatRequest(messages=(Message("user", "hi"),), reasoning_budget=0)
    assert budget_of(own, 50) == 0


def test_the_pipeline_marks_the_first_forced_token_once():
    from engine.backends.base import Token

    metrics = Metrics()
    p = TokenPipeline("r1", OutputParser("reasoning", "qwen-xml"), metrics=metrics)
    p.start("openai", "m", 3)
    evs = []
    for text in ("I", " think"):
        evs += p.feed(Token(1, text, 0.0))
    assert p.reasoning_tokens == 2
    for text in ("\n</think>", "\n\n"):
        evs += p.feed(Token(2, text, 0.0, forced=True))
    evs += p.feed(Token(3, "Four.", 0.0))
    evs += p.finish()
    marks = [ev for ev in evs if ev.kind == REASONING_BUDGET]
    assert len(marks) == 1 and marks[0].span == (len("I think\n</think>"),) * 2
    assert marks[0].text == "closed after 2 reasoning tokens"
    assert p.reasoning_tokens == 2  # the close is markup, the answer content
    res = result_of(evs)
    assert res.reasoning == "I think" and res.content == "Four."
    assert metrics.snapshot()["totals"]["reasoning_budget"] == 1
    assert verdict_of(evs, "stop").kind == BUDGET_CLOSED
    assert verdict_of([ev for ev in evs if ev.kind != REASONING_BUDGET], "stop").kind == ANSWERED


# -- the real engine ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def budget_service(default_model, tmp_path_factory):
    from engine.backends.llama.engine import LlamaEngine
    from engine.chat.packs import resolve_pack

    engine = LlamaEngine(default_model, n_ctx=2048)
    recorder = Recorder(tmp_path_factory.mktemp("rec") / "budget.jsonl", model=engine.name,
                        pack="qwen3-xml")
    # The Qwen3 XML pack's template on SmolLM2 (both ChatML): the prompt opens <think>.
    svc = Service(engine, resolve_pack("qwen3-xml", model=str(default_model)),
                  metrics=Metrics(engine), recorder=recorder)
    yield svc
    engine.close()
    recorder.close()


SKY = "Why is the sky blue? Think it through."  # SmolLM2 reasons on past 160 tokens
SUM = "What is 2+2? Answer with one number."  # it reasons ~10 tokens, then answers and stops


def _ask(budget: int | None, question: str = SKY, **kw) -> ChatRequest:
    return ChatRequest(messages=(Message("user", question),),
                       sampling=Sampling(temperature=0.0, seed=1), max_tokens=160,
                       reasoning_budget=budget, **kw)


@pytest.mark.model
@pytest.mark.parametrize("budget, question", [(1, SUM), (5, SUM), (32, SKY)])
def test_the_real_engine_closes_the_reasoning_at_its_budget(budget_service, budget, question):
    svc = budget_service
    assert svc.submit(_ask(None)).prompt.rstrip().endswith("<think>")
    before = svc.metrics.snapshot()["totals"]["reasoning_budget"]
    run = svc.submit(_ask(budget, question))
    res = run.wait(300)
    toks = run.tokens
    first = next(i for i, t in enumerate(toks) if t.forced)
    n_forced = next((i for i in range(first, len(toks)) if not toks[i].forced), len(toks)) - first
    # The model wrote exactly `budget` tokens of reasoning, then the family's close was forced.
    assert first == budget == run.pipeline.reasoning_tokens
    assert "".join(t.text for t in toks[first:first + n_forced]) == close_text("qwen-xml")
    assert res.reasoning.strip() == "".join(t.text for t in toks[:first]).strip()
    assert res.content.strip(), "the answer follows the close"
    assert not any(res.anomalies.values()), res.anomalies  # no implicit end, no stray close
    assert not any(ev.kind == ANOMALY for ev in run.events)
    marks = [i for i, ev in enumerate(run.events) if ev.kind == REASONING_BUDGET]
    assert len(marks) == 1
    assert svc.metrics.snapshot()["totals"]["reasoning_budget"] == before + 1
    # The short question's answer ends by itself: the budget decided how the reply went.
    expected = BUDGET_CLOSED if question == SUM else "length"
    assert verdict_of(run.events, run.finish.reason).kind == expected
    # Recorded: the forced marks come back, and the recording re-parsed shows the event.
    rec = next(r for r in read_session(svc.recorder.path).requests if r.id == run.id)
    assert [t.forced for t in rec.tokens] == [t.forced for t in toks]
    replayed = TokenPipeline("x", OutputParser("reasoning", "qwen-xml"))
    evs = [ev for t in rec.tokens for ev in replayed.feed(t)] + replayed.finish()
    assert [ev.kind for ev in evs].count(REASONING_BUDGET) == 1


@pytest.mark.model
def test_a_reasoning_that_ends_within_its_budget_is_left_alone(budget_service):
    run = budget_service.submit(_ask(32, SUM))
    res = run.wait(300)
    assert not any(t.forced for t in run.tokens)
    assert 0 < run.pipeline.reasoning_tokens < 32 and res.reasoning.strip()
    assert REASONING_BUDGET not in [ev.kind for ev in run.events]
    assert verdict_of(run.events, run.finish.reason).kind == ANSWERED


@pytest.mark.model
def test_budget_zero_turns_thinking_off(budget_service):
    run = budget_service.submit(_ask(0))
    res = run.wait(300)
    assert not run.prompt.rstrip().endswith("<think>")  # the template closed it itself
    assert res.reasoning == "" and res.content.strip()
    assert run.pipeline.reasoning_tokens == 0


@pytest.mark.model
def test_budget_zero_closes_a_reasoning_the_prompt_opens_anyway(budget_service):
    """A prefill that opens the reasoning: the close is forced before any token is drawn."""
    req = ChatRequest(messages=(Message("user", "Why is the sky blue?"),
                                Message("assistant", "<think>\n")),
                      continue_final=True, sampling=Sampling(temperature=0.0, seed=1),
                      max_tokens=60, reasoning_budget=0)
    run = budget_service.submit(req)
    res = run.wait(300)
    assert run.start_state == "reasoning", run.prompt[-80:]
    n = len(close_text("qwen-xml"))
    assert run.tokens[0].forced and "".join(t.text for t in run.tokens)[:n] == close_text(
        "qwen-xml")
    assert res.reasoning.strip() == "" and res.content.strip()
    assert run.pipeline.reasoning_tokens == 0
    assert [ev.kind for ev in run.events].count(REASONING_BUDGET) == 1
