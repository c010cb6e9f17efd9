"""UpstreamEngine against real HTTP servers on 127.0.0.1: another Prism serving a replay (the
happy path, token by token), and a scripted upstream for what it sends and the error table
(refused, 4xx, 500, slow, cut mid-way, an error event mid-stream), cancel and reachability."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import pytest

from app.api.server import ServerThread
from app.api.state import AppState
from engine.backends.base import Finish, Job, Token
from engine.backends.upstream.engine import UpstreamEngine
from engine.backends.upstream.wire import api_base, split_delta
from engine.chat.packs import resolve_pack
from engine.chat.request import Sampling
from engine.record.replay import ReplayEngine, split_text
from engine.service import Service
from tests.engine.backends.upstream.scripted_upstream import (
    MODEL,
    Reply,
    ScriptedUpstream,
    Seen,
    chunk,
    free_port,
    stream_texts,
)
from tests.support import wait_until

OUTPUT = "Let me look.\n</think>\n\nIt is <b>sunny</b> — 24 °C.\n"


class Collect:
    def __init__(self) -> None:
        self.tokens: list[Token] = []
        self.finish: Finish | None = None
        self.done = threading.Event()

    def job(self, prompt: str = "<|im_start|>user\nhi<|im_end|>\n", **kw) -> Job:
        return Job(prompt=prompt, on_token=self.tokens.append, on_finish=self._fin, **kw)

    def _fin(self, fin: Finish) -> None:
        self.finish = fin
        self.done.set()

    def wait(self, timeout: float = 20.0) -> Finish:
        assert self.done.wait(timeout), "the job never finished"
        assert self.finish is not None
        return self.finish

    @property
    def text(self) -> str:
        return "".join(t.text for t in self.tokens)


@pytest.fixture
def engines():
    made: list[UpstreamEngine] = []

    def make(url: str, **kw) -> UpstreamEngine:
        eng = UpstreamEngine(url, **kw)
        made.append(eng)
        assert eng.ready.wait(10)
        return eng

    yield make
    for eng in made:
        eng.close()


def run(engine: UpstreamEngine, **job) -> Collect:
    c = Collect()
    engine.submit(c.job(**job))
    c.wait()
    return c


def test_api_base_normalises_what_users_type():
    assert api_base("localhost:8000") == "http://localhost:8000/v1"
    assert api_base("http://h:1/v1/") == "http://h:1/v1"
    assert api_base("https://h/v1") == "https://h/v1"


def test_a_prism_replay_upstream_streams_its_output_token_by_token(tmp_path: Path, engines):
    out = tmp_path / "out.txt"
    out.write_text(OUTPUT, encoding="utf-8")
    replay = ReplayEngine([out])
    service = Service(replay, resolve_pack("qwen3-xml", require_model=False))
    with ServerThread(AppState(service=service)) as server:
        eng = engines(server.url)  # no /v1: added
        assert eng.load_error is None
        assert eng.name == "qwen3-xml"  # what its /v1/models lists
        assert "<|im_start|>" in eng.info.chat_template  # its /props publishes the template
        c = run(eng)
    replay.close()
    assert c.text == OUTPUT
    assert [t.text for t in c.tokens] == split_text(OUTPUT)  # one delta, one token
    fin = c.finish
    assert fin.reason == "stop" and fin.error is None
    assert fin.timings.output_tokens == len(split_text(OUTPUT))
    # The upstream's own prompt count (its usage) replaces the local estimate.
    assert fin.timings.prompt_tokens == len(split_text("<|im_start|>user\nhi<|im_end|>\n"))
    assert fin.timings.ttft_ms >= fin.timings.prompt_ms > 0


def test_what_is_sent(engines):
    async def script(req: Seen, reply: Reply) -> None:
        await stream_texts(reply, ["ok"])

    with ScriptedUpstream(script) as up:
        eng = engines(up.url, api_key="sekrit")
        assert eng.n_ctx == 4096 and eng.model == MODEL
        eng.stops, eng.preserved = ("<|im_end|>",), ("<|channel|>",)  # from the pack
        run(eng, max_tokens=7, stop=("</s>",), top_logprobs=3,
            sampling=Sampling(temperature=0.2, top_p=0.5, top_k=7, min_p=0.1,
                              repeat_penalty=1.1, seed=42))
        run(eng, prompt_ids=(0,) * 96, max_tokens=4096 - 96)  # fills the context: no cap
    sent = [r for r in up.requests if r.path == "/v1/completions"]
    first, second = (r.body for r in sent)
    assert sent[0].headers["authorization"] == "Bearer sekrit"
    assert first["model"] == MODEL and first["prompt"].startswith("<|im_start|>user")
    assert first["stream"] is True and first["stream_options"] == {"include_usage": True}
    assert (first["max_tokens"], first["logprobs"]) == (7, 3)
    assert first["stop"] == ["</s>", "<|im_end|>"] and second["stop"] == ["<|im_end|>"]
    assert first["preserved_tokens"] == ["<|channel|>"]  # llama.cpp's server keeps these
    assert (first["temperature"], first["top_p"], first["top_k"], first["min_p"],
            first["seed"]) == (0.2, 0.5, 7, 0.1, 42)
    assert first["repetition_penalty"] == first["repeat_penalty"] == 1.1
    assert first["skip_special_tokens"] is False
    assert first["spaces_between_special_tokens"] is False
    assert second["max_tokens"] is None and "logprobs" not in second and "seed" not in second


def test_logprobs_split_a_delta_into_its_tokens():
    lp = {"tokens": ["Hel", "lo"], "token_logprobs": [-0.1, -0.2],
          "top_logprobs": [{"Hel": -0.1, "Hi": -2.5}, {"lo": -0.2}]}
    toks = split_delta("Hello", lp, 1.0)
    assert [(t.text, t.top) for t in toks] == [
        ("Hel", (("Hel", -0.1), ("Hi", -2.5))), ("lo", (("lo", -0.2),))]
    # llama.cpp's chat-style shape; and logprobs that do not spell the text: one token.
    cpp = {"content": [{"token": "Hi", "logprob": -0.3,
                        "top_logprobs": [{"token": "Hi", "logprob": -0.3}]}]}
    assert [(t.text, t.top) for t in split_delta("Hi", cpp, 1.0)] == [("Hi", (("Hi", -0.3),))]
    assert [t.text for t in split_delta("Hello", {"tokens": ["x"]}, 1.0)] == ["Hello"]


def test_stop_reason_names_the_stop_string(engines):
    async def script(req: Seen, reply: Reply) -> None:
        await reply.start_stream()
        await reply.event(chunk("done"))
        await reply.event(chunk("", "stop", stop_reason="END"))
        await reply.event("[DONE]")
        await reply.end_stream()

    with ScriptedUpstream(script) as up:
        fin = run(engines(up.url), stop=("END",)).finish
    assert (fin.reason, fin.stop_sequence) == ("stop", "END")


def test_length_finish(engines):
    async def script(req: Seen, reply: Reply) -> None:
        await stream_texts(reply, ["a", "b"], finish="length")

    with ScriptedUpstream(script) as up:
        c = run(engines(up.url), max_tokens=2)
    assert (c.text, c.finish.reason) == ("ab", "length")


# --- the error table --------------------------------------------------------------------------


def test_connection_refused(engines):
    eng = engines(f"http://127.0.0.1:{free_port()}/v1", connect_timeout=2.0)
    assert "unreachable" in (eng.load_error or "")
    assert eng.state == "error"
    fin = run(eng).finish
    assert (fin.reason, fin.status) == ("error", 502)
    assert "could not reach the upstream" in (fin.error or "")


@pytest.mark.parametrize(("status", "expected"), [(400, 400), (404, 404), (401, 502),
                                                  (500, 502), (503, 502)])
def test_an_error_status_keeps_the_upstream_message(engines, status, expected):
    async def script(req: Seen, reply: Reply) -> None:
        await reply.json(status, {"error": {"message": f"upstream says {status}",
                                            "type": "x", "code": status}})

    with ScriptedUpstream(script) as up:
        fin = run(engines(up.url)).finish
    assert (fin.reason, fin.status) == ("error", expected)
    assert f"answered {status}: upstream says {status}" in (fin.error or "")


def test_slow_upstream_times_out(engines):
    async def script(req: Seen, reply: Reply) -> None:
        await asyncio.sleep(3.0)
        await stream_texts(reply, ["late"])

    with ScriptedUpstream(script) as up:
        c = run(engines(up.url, timeout=0.5))
    assert (c.finish.reason, c.finish.status) == ("error", 504)
    assert "timed out" in (c.finish.error or "")
    assert c.tokens == []


def test_a_stream_cut_mid_way_keeps_what_came(engines):
    async def script(req: Seen, reply: Reply) -> None:
        await reply.start_stream()
        await reply.event(chunk("Hello"))
        await reply.event(chunk(" wor"))
        reply.cut()

    with ScriptedUpstream(script) as up:
        c = run(engines(up.url))
    assert c.text == "Hello wor"  # nothing already streamed is lost
    assert (c.finish.reason, c.finish.status) == ("error", 502)
    assert "cut the stream after 2 tokens" in (c.finish.error or "")


def test_an_error_event_mid_stream(engines):
    async def script(req: Seen, reply: Reply) -> None:
        await reply.start_stream()
        await reply.event(chunk("Hi"))
        await reply.event({"error": {"message": "CUDA out of memory", "code": 500}})
        await reply.end_stream()

    with ScriptedUpstream(script) as up:
        c = run(engines(up.url))
    assert c.text == "Hi"
    assert (c.finish.reason, c.finish.status) == ("error", 502)
    assert "CUDA out of memory" in (c.finish.error or "")


def test_cancel_closes_the_upstream_stream(engines):
    async def script(req: Seen, reply: Reply) -> None:
        await stream_texts(reply, ["tick "] * 400, delay=0.02)

    with ScriptedUpstream(script) as up:
        eng = engines(up.url)
        c = Collect()
        job = c.job()
        eng.submit(job)
        wait_until(lambda: len(c.tokens) >= 3, 10, what="three tokens")
        assert eng.queue_depth() == 1 and eng.state == "generating"
        job.cancel()
        fin = c.wait(5)
        wait_until(lambda: up.hangups, 5, 0.02, "the upstream to see Prism hang up")
        assert up.hangups == 1  # the upstream saw Prism hang up: it stops generating
    assert fin.reason == "cancelled"
    assert 3 <= len(c.tokens) < 400
    assert eng.queue_depth() == 0


def test_jobs_run_side_by_side(engines):
    """Requests to an upstream are not queued behind each other: two slow streams overlap."""
    async def script(req: Seen, reply: Reply) -> None:
        await stream_texts(reply, ["x"] * 20, delay=0.05)

    with ScriptedUpstream(script) as up:
        eng = engines(up.url)
        a, b = Collect(), Collect()
        eng.submit(a.job())
        eng.submit(b.job())
        assert eng.queue_depth() == 2
        fa, fb = a.wait(), b.wait()
    # Each took ~1 s; run one after the other the second would start after the first ended.
    t_first_b = b.tokens[0].t
    assert t_first_b < a.tokens[-1].t
    assert fa.reason == fb.reason == "stop"


def test_close_cancels_jobs_in_flight(engines):
    async def script(req: Seen, reply: Reply) -> None:
        await stream_texts(reply, ["x"] * 400, delay=0.02)

    with ScriptedUpstream(script) as up:
        eng = UpstreamEngine(up.url)
        eng.ready.wait(5)
        c = Collect()
        eng.submit(c.job())
        while not c.tokens:
            time.sleep(0.01)
        eng.close()
        assert c.wait(5).reason == "cancelled"
        assert eng.state == "closed"
        with pytest.raises(RuntimeError):
            eng.submit(Collect().job())
