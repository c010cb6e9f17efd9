"""app/rerun.py, `prism rerun`, on real engines: the default model against itself at another seed,
against Gemma 3 270M (the `gemma` extra), through `--upstream` to a live Prism server, an older
Prism's recording, and Ctrl-C in the middle.

The original recordings are made here by the real service on the default model (a few short
requests, top alternatives recorded), so each test knows what was sent and checks the rerun's
record of it and the compare against the two token streams themselves.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from app.rerun import Overrides, rebuild, rerun_requests, rerun_session
from engine.backends.llama.engine import LlamaEngine
from engine.chat.packs import PackError, load_pack
from engine.chat.request import ChatRequest, Message, Sampling
from engine.metrics import Metrics
from engine.record.compare import compare, compare_sessions, pairs, side_of
from engine.record.reader import read_session
from engine.record.recording import Recorder
from engine.service import Service
from tests.app.conftest import TOOLS, start_live
from tests.support import wait_until

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "resources" / "sessions" / "demo.jsonl"  # written by an older Prism (no readings)
ASKS = ("Write one sentence about the sea.", "Name three colours.", "What is 2 + 2?",
        "Say hello to Ada.")


@pytest.fixture(scope="module")
def smol(request) -> LlamaEngine:
    gguf = request.getfixturevalue("default_model")
    engine = LlamaEngine(gguf, n_ctx=1024, n_threads=1, parallel=1)
    yield engine
    engine.close()


def service_on(engine: LlamaEngine, pack: str, recorder: Recorder | None) -> Service:
    return Service(engine, load_pack(pack), metrics=Metrics(engine), recorder=recorder)


def record_original(engine: LlamaEngine, path: Path, *, max_tokens: int = 24) -> Path:
    """Requests as clients send them: sampled at 1.0 with seed 1, alternatives recorded, one
    with tools declared."""
    with Recorder(path, model=engine.name, pack="smollm2") as rec:
        service = service_on(engine, "smollm2", rec)
        for k, ask in enumerate(ASKS):
            req = ChatRequest(messages=(Message("user", ask),), max_tokens=max_tokens,
                              sampling=Sampling(temperature=1.0, seed=1), top_logprobs=3,
                              tools=tuple(TOOLS) if k == 1 else ())
            service.submit(req).wait()
    return path


def rerun_into(service: Service, original: Path, out: Path, **overrides):
    with Recorder(out, model=service.engine.name, pack=service.pack.name,
                  rerun_of=str(original)) as rec:
        service.recorder = rec
        report = rerun_session(service, read_session(original), rec,
                               overrides=Overrides(**overrides))
    return report, read_session(out)


def test_another_seed_parts_at_the_first_differing_token(smol, tmp_path: Path) -> None:
    original = record_original(smol, tmp_path / "orig.jsonl")
    report, again = rerun_into(service_on(smol, "smollm2", None), original,
                               tmp_path / "seed2.jsonl", seed=2)
    first = read_session(original)
    assert (report.done, report.total, report.interrupted) == (len(ASKS), len(ASKS), False)
    assert again.rerun_of == str(original)
    # Each new request names its original and was sent as it, but for the seed.
    assert [r.counterpart for r in again.requests] == [r.id for r in first.requests]
    for old, new in zip(first.requests, again.requests, strict=True):
        was, now = rebuild(old), rebuild(new)
        assert now.sampling.seed == 2 and was.sampling.seed == 1
        assert (now.messages, now.tools, now.max_tokens, now.top_logprobs) == \
            (was.messages, was.tools, was.max_tokens, was.top_logprobs)
    parted = 0
    for old, new in pairs(first, again):
        a, b = [t.id for t in old.tokens], [t.id for t in new.tokens]
        c = compare(side_of(old, "was"), side_of(new, "now"))
        if c.parting is None:
            assert a == b
            continue
        parted += 1
        k = c.parting.index_a
        # One vocabulary: the first differing token id, on both sides at the same index.
        assert c.parting.index_b == k and a[:k] == b[:k]
        assert k == len(a) or k == len(b) or a[k] != b[k]
        assert k == next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y),
                         min(len(a), len(b)))
        # Alternatives were recorded: each side's own token is in its own top-3 when sampled
        # from there; any probability given is one.
        for p in (c.parting.p_a_own, c.parting.p_a_other, c.parting.p_b_own,
                  c.parting.p_b_other):
            assert p is None or 0.0 < p <= 1.0
    assert parted, "four requests sampled at temperature 1 with two seeds never parted"


def test_the_same_seed_on_the_same_model_gives_the_same_tokens(smol, tmp_path: Path) -> None:
    original = record_original(smol, tmp_path / "orig.jsonl")
    _, again = rerun_into(service_on(smol, "smollm2", None), original, tmp_path / "same.jsonl")
    listed = compare_sessions(read_session(original), again)
    assert [c.identical for c in listed] == [True] * len(ASKS)


def test_a_second_real_model_gemma(smol, tmp_path: Path) -> None:
    try:
        pack = load_pack("gemma3-270m")
    except PackError as e:
        pytest.skip(reason=f"the gemma extra is not installed ({e}): pip install -e '.[gemma]'")
    original = record_original(smol, tmp_path / "orig.jsonl")
    engine = LlamaEngine(pack.gguf, n_ctx=1024, n_threads=1, parallel=1)
    try:
        service = Service(engine, pack, metrics=Metrics(engine))
        report, again = rerun_into(service, original, tmp_path / "gemma.jsonl", seed=1)
    finally:
        engine.close()
    assert report.done == len(ASKS) and report.tokens > 0
    assert "gemma" in again.model.lower() and again.model != read_session(original).model
    # Gemma's template rendered the same conversation.
    assert all("<start_of_turn>user" in r.prompt and ASKS[k] in r.prompt
               for k, r in enumerate(again.requests))
    for c in compare_sessions(read_session(original), again):
        assert not c.identical
        p = c.parting
        # Two vocabularies: the parting is where the texts stop agreeing, each side's tokens
        # before it spelling exactly the shared text.
        assert c.a.text[:p.offset] == c.b.text[:p.offset]
        assert "".join(t.text for t in c.a.tokens[:p.index_a]) == c.a.text[:p.offset]
        assert "".join(t.text for t in c.b.tokens[:p.index_b]) == c.b.text[:p.offset]


def test_an_older_prisms_recording_still_reruns(smol, tmp_path: Path) -> None:
    old = read_session(DEMO)
    assert "reading" not in DEMO.read_text(encoding="utf-8").splitlines()[1]  # truly old
    report, again = rerun_into(service_on(smol, "smollm2", None), DEMO, tmp_path / "demo.jsonl",
                               max_tokens=8)
    assert (report.done, report.failed) == (len(old.requests), 0)
    for was, now in pairs(old, again):
        assert now.counterpart == was.id
        assert now.request["messages"] == was.request["messages"]
        assert now.request["sampling"]["seed"] == was.request["sampling"]["seed"]
        assert now.request["api"] == was.request["dialect"]  # the client, as it was then named
        assert now.finish in ("stop", "length") and len(now.tokens) <= 8


def _prism(*args: str, **kw) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen([sys.executable, "-m", "app", "rerun", *args], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)


def test_rerun_through_upstream_against_prism_serve(smol, tmp_path: Path) -> None:
    original = record_original(smol, tmp_path / "orig.jsonl", max_tokens=12)
    back = start_live(service_on(smol, "smollm2", None), model_name="back-model")
    try:
        out = tmp_path / "up.jsonl"
        proc = _prism(str(original), "--upstream", back.url + "/v1", "--out", str(out))
        stdout, stderr = proc.communicate(timeout=300)
    finally:
        back.thread.stop()
    assert proc.returncode == 0, stderr
    assert f"{len(ASKS)}/{len(ASKS)} requests" in stderr and "tok/s" in stderr
    again = read_session(out)
    assert back.url in again.header.get("upstream", "")
    assert again.rerun_of == str(original.resolve())
    assert [r.counterpart for r in again.requests] == \
        [r.id for r in read_session(original).requests]
    # The upstream sampled with the recorded seed, so the same tokens came back.
    listed = compare_sessions(read_session(original), again)
    assert [c.parting for c in listed] == [None] * len(ASKS)
    # stdout: one line per pair, its original's id first.
    assert sorted(line.split("\t")[0] for line in stdout.splitlines()) == \
        sorted(r.id for r in read_session(original).requests)


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_ctrl_c_keeps_what_was_done(default_model, tmp_path: Path, stop) -> None:
    # An original of one short request, then long ones, so Ctrl-C lands while one generates
    # (several, so a busy machine that polls past one still cuts the next); a rerun needs only
    # the request records.
    asks = ("Hi.", *(f"Tell me a long story about a {what}." for what in
                     ("lighthouse keeper", "fox", "baker", "river")))
    original = tmp_path / "orig.jsonl"
    with Recorder(original, model="SmolLM2", pack="smollm2") as rec:
        for k, ask in enumerate(asks):
            rec.request(f"o{k}", ChatRequest(messages=(Message("user", ask),),
                                              max_tokens=2 if k == 0 else 800,
                                              sampling=Sampling(seed=k)), "")
    out = tmp_path / "cut.jsonl"
    # Started with SIGINT ignored, as a script's background job is: a stop all the same.
    proc = _prism(str(original), "--pack", "smollm2", "--n-ctx", "1024", "--threads", "1",
                  "--out", str(out),
                  preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    # Ctrl-C once a long request is generating: its counterpart record follows its
    # submission, and its first token record follows that.
    def generating() -> bool:
        text = out.read_text(encoding="utf-8") if out.exists() else ""
        return '"of": "o1"' in text and f'"type": "token", "id": "{_last_id(out)}"' in text

    try:
        wait_until(generating, timeout=120, what="a long request's first token")
        proc.send_signal(stop)
        _, rest = proc.communicate(timeout=120)
    finally:  # a failure leaves no process behind for a later test to trip over
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, rest
    assert "interrupted" in rest
    kept = read_session(out)  # whole records only: strict reading finds no damage
    n = len(kept.requests)
    assert 2 <= n <= len(asks), rest
    assert [r.counterpart for r in kept.requests] == [f"o{k}" for k in range(n)]
    *finished, cut = kept.requests
    assert all(r.finish in ("stop", "length") for r in finished)
    assert cut.finish == "cancelled" and 0 < len(cut.tokens) < 800


def _last_id(path: Path) -> str:
    ids = [line.split('"id": "')[1].split('"')[0] for line in
           path.read_text(encoding="utf-8").splitlines() if '"type": "request"' in line]
    return ids[-1] if ids else "-"


# -- the loop's hooks, as the window's rerun uses them (replayed engines: no model) ------------


def _recorded(tmp_path: Path, asks=ASKS[:2]) -> Path:
    path = tmp_path / "orig.jsonl"
    with Recorder(path, model="m", pack="smollm2") as rec:
        for k, ask in enumerate(asks):
            rec.request(f"o{k}", ChatRequest(messages=(Message("user", ask),),
                                              tools=tuple(TOOLS)), "")
    return path


def test_the_hooks_see_each_request_before_and_after_it_is_sent(replay_service, tmp_path):
    original = read_session(_recorded(tmp_path))
    other = replay_service("one", "two", pack="smollm2")
    seen: list[tuple] = []
    report = rerun_requests(other, original.requests, None,
                            before=lambda rec, req: seen.append(("before", rec.id, req)),
                            sent=lambda run: seen.append(("sent", run.request)),
                            stopped=lambda: False)
    assert (report.done, report.total, report.path, report.interrupted) == (2, 2, None, False)
    # Announced just before it was sent, as the very request the run keeps.
    assert [s[:2] for s in seen[0::2]] == [("before", "o0"), ("before", "o1")]
    assert all(seen[k + 1][1] is seen[k][2] for k in (0, 2))


def test_a_stop_cancels_the_request_in_flight_and_ends_the_loop(replay_service, tmp_path):
    import threading

    original = read_session(_recorded(tmp_path))
    # Replayed at the recorded pace: long enough to be stopped while it streams.
    other = replay_service("word " * 400, "never sent", pack="smollm2", speed=1.0)
    stop = threading.Event()
    runs, out = [], {}
    loop = threading.Thread(target=lambda: out.update(report=rerun_requests(
        other, original.requests, None, sent=runs.append, stopped=stop.is_set)))
    loop.start()
    wait_until(lambda: runs and runs[0].tokens, 10, what="the first request's first token")
    stop.set()  # as the window's Stop re-runs does: ask, then cancel the one in flight
    runs[0].cancel()
    loop.join(10)
    report = out["report"]
    assert report.interrupted and (report.done, report.total) == (0, 2) and len(runs) == 1
    assert runs[0].finish.reason == "cancelled" and len(runs[0].tokens) < 400


def test_a_request_the_other_template_refuses_is_recorded_and_named(replay_service, tmp_path):
    # Llama 3's template puts the tools in the first user message: a conversation without one
    # is refused; it is recorded all the same, and named as the original's counterpart.
    path = tmp_path / "orig.jsonl"
    with Recorder(path, model="m", pack="smollm2") as rec:
        rec.request("o0", ChatRequest(messages=(Message("system", "Use the tools."),),
                                      tools=tuple(TOOLS)), "")
        rec.request("o1", ChatRequest(messages=(Message("user", "Hi."),), tools=tuple(TOOLS)),
                    "")
    other = replay_service('{"name": "get_weather", "parameters": {"city": "Paris"}}',
                           pack="llama3-json")
    lines: list[str] = []
    with Recorder(tmp_path / "again.jsonl", model="m", pack="llama3-json",
                  rerun_of=str(path)) as rec:
        other.recorder = rec
        report = rerun_session(other, read_session(path), rec, progress=lines.append)
    assert (report.done, report.failed) == (1, 1)
    assert any("o0 not sent: chat template refused the request" in line for line in lines)
    again = read_session(tmp_path / "again.jsonl")
    assert [(r.counterpart, r.refused, r.finish) for r in again.requests] == \
        [("o0", "template", "error"), ("o1", "", "stop")]
    assert [(a.id, b.id) for a, b in pairs(read_session(path), again)] == \
        [("o0", again.requests[0].id), ("o1", again.requests[1].id)]


def test_the_window_s_engine_choice_builds_prism_rerun_s_service(tmp_path):
    from app.rerun import service_for
    from inspector.rerun import EngineChoice

    with pytest.raises(SystemExit, match="nope"):
        service_for(EngineChoice("pack", "nope"))
    with pytest.raises((SystemExit, OSError, ValueError)):
        service_for(EngineChoice("model", str(tmp_path / "missing.gguf")))


# -- failures, damaged recordings and a model cut short: the exit status says -----------------


def _asked(tmp_path: Path, *asks: str, name: str = "orig.jsonl") -> Path:
    path = tmp_path / name
    with Recorder(path, model="m", pack="smollm2") as rec:
        for k, ask in enumerate(asks):
            rec.request(f"o{k}", ChatRequest(messages=(Message("user", ask),), max_tokens=4),
                        "")
    return path


async def _by_prompt(req, reply) -> None:
    """The scripted upstream's answer to each ask: a reply, a 500, a stream cut after one
    token, or a stall past the rerun's --upstream-timeout."""
    import asyncio

    from tests.engine.backends.upstream.scripted_upstream import chunk, stream_texts

    prompt = req.body.get("prompt", "")
    if "FAIL500" in prompt:
        await reply.json(500, {"error": {"message": "CUDA error: out of memory", "type": "x"}})
    elif "CUT" in prompt:
        await reply.start_stream()
        await reply.event(chunk("Half"))
        reply.cut()
    elif "STALL" in prompt:
        await reply.start_stream()
        await asyncio.sleep(60)  # cancelled when the upstream stops
    else:
        await stream_texts(reply, ["Fine", "."])


def _rerun(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "app", "rerun", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)


def test_some_requests_failing_is_status_1_with_each_reason_and_a_summary(tmp_path: Path):
    from tests.engine.backends.upstream.scripted_upstream import ScriptedUpstream

    original = _asked(tmp_path, "Say hi.", "FAIL500 now", "CUT now", "STALL now")
    out = tmp_path / "again.jsonl"
    with ScriptedUpstream(_by_prompt) as up:
        r = _rerun(str(original), "--upstream", up.url, "--pack", "smollm2",
                   "--upstream-timeout", "2", "--out", str(out))
    assert r.returncode == 1, r.stderr
    err = r.stderr.splitlines()
    assert any(line.startswith("rerun: o1 failed: ") and "CUDA error: out of memory" in line
               for line in err)
    assert any(line.startswith("rerun: o2 failed: ") and "cut the stream after 1 tokens" in line
               for line in err)
    assert any(line.startswith("rerun: o3 failed: ") and "timed out" in line for line in err)
    assert "1/4 requests" in r.stderr and ", 3 failed" in r.stderr
    assert err[-1].startswith("prism rerun: 3 of 4 requests failed: ")
    # Every request was sent, and the recording keeps how each ended.
    again = read_session(out)
    assert [(q.counterpart, q.finish) for q in again.requests] == \
        [("o0", "stop"), ("o1", "error"), ("o2", "error"), ("o3", "error")]


def test_every_request_failing_is_status_2(tmp_path: Path):
    from tests.engine.backends.upstream.scripted_upstream import free_port

    original = _asked(tmp_path, "Say hi.", "Say bye.")
    url = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens there
    r = _rerun(str(original), "--upstream", url, "--pack", "smollm2",
               "--out", str(tmp_path / "again.jsonl"))
    assert r.returncode == 2, r.stderr
    assert r.stderr.splitlines()[-1] == \
        f"prism rerun: 2 of 2 requests failed: could not reach the upstream {url}: " \
        "All connection attempts failed (x2)"


def test_a_recording_cut_mid_line_reruns_what_precedes_the_damage(tmp_path: Path):
    from tests.engine.backends.upstream.scripted_upstream import ScriptedUpstream

    original = _asked(tmp_path, "Say hi.", "Say bye.", "Say nothing.")
    data = original.read_bytes()
    original.write_bytes(data[:-30])  # what a writer killed mid-line leaves: half a record
    out = tmp_path / "again.jsonl"
    with ScriptedUpstream(_by_prompt) as up:
        r = _rerun(str(original), "--upstream", up.url, "--pack", "smollm2", "--out", str(out))
    assert r.returncode == 0, r.stderr
    assert f"prism rerun: warning: {original}: line 4: truncated record (the file ends " \
        "mid-line, was the writer killed?); re-running the 2 requests before line 4" in r.stderr
    assert "failed" not in r.stderr
    assert [q.counterpart for q in read_session(out).requests] == ["o0", "o1"]


def test_a_truncated_model_is_one_line_naming_it_and_status_2(default_model, tmp_path: Path):
    cut = tmp_path / "cut.gguf"
    with default_model.open("rb") as src:
        cut.write_bytes(src.read(default_model.stat().st_size // 2))
    r = _rerun(str(_asked(tmp_path, "Say hi.")), "--model", str(cut))
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr
    assert r.stderr.splitlines()[-1].startswith(f"prism: cannot load the model: {cut} is "
                                                "truncated: ")


def test_help_documents_the_exit_status():
    r = _rerun("--help")
    assert r.returncode == 0
    text = " ".join(r.stdout.split())
    assert "exit status: 0 every request re-ran; 1 some failed (the rest re-ran); 2 every " \
        "request failed" in text
