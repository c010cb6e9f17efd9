"""`prism serve --upstream URL --tap` for every model family, both sides real processes.

For each of the eleven families, one `prism serve --replay` upstream with the family's pack and
one `prism serve --upstream ... --tap` with the same pack in front of it (22 processes, started
once for the module, all at once: startup is what costs, about 40 s on two cores).
The upstream replays:

- a plain-text output in the family's syntax, written by the family's own writer
  (engine/parse/families/registry.py): reasoning (not for Llama 3, which has none), an answer
  and one call. The upstream's parser reads it, so the client gets a structured call;
- for the request that asks "Leak it.", the same output from a recording (written here) that
  says it was parsed with another family: the upstream's parser misses the call and returns
  it as content text, a planted leak. Same upstream process, so no second pair per family.

Checked: the client (httpx, streamed) gets the upstream's bytes unchanged (compared with the
upstream's direct answer to the same request, less the id, time and timings that differ
between two requests); the tap's recording (`--record-to`) holds the output rebuilt in the
family's syntax, the call, the reasoning and the answer in their channels, finish
"tool_calls", and no `upstream_leak`; the planted leak is flagged `upstream_leak`.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from app.api import openai as openai_api
from app.api.convert import validate
from engine.chat.detect import start_state
from engine.chat.packs import resolve_pack
from engine.parse import families
from engine.parse.events import UPSTREAM_LEAK, ToolCall
from engine.record.reader import read_session
from engine.record.replay import ReplayEngine, split_text
from engine.service import Service
from tests.app.conftest import WEATHER
from tests.engine.backends.upstream.scripted_upstream import free_port
from tests.support import wait_healthy, wait_until

ROOT = Path(__file__).resolve().parents[2]
FAMILIES = ("qwen-xml", "hermes-json", "harmony", "deepseek", "dsml", "glm", "kimi-k2",
            "minimax-xml", "mistral", "gemma4", "llama3-json")
REASONING = "I should check the forecast."
ANSWER = "Let me look it up."
CALL = ToolCall("call_0", "get_weather", {"city": "Paris"}, 0)
ASK = "What is the weather in Paris?"
LEAK_ASK = "Leak it."


def leaky_family(family: str) -> str:
    """A family whose parser leaves this family's call as text (Qwen XML reads none of the
    other families' calls; Hermes JSON none of Qwen XML's)."""
    return "hermes-json" if family == "qwen-xml" else "qwen-xml"


def body(ask: str) -> dict:
    return {"model": "m", "messages": [{"role": "user", "content": ask}], "tools": [WEATHER],
            "stream": True}


@dataclass
class Pair:
    family: str
    pack: str
    start: str  # where the pack's prompt leaves the model: "reasoning" or "content"
    output: str  # what the upstream's model "writes"
    upstream: str  # base URLs
    tap: str
    record: Path  # the tap's recording


def prompt_start(pack_name: str, tmp: Path) -> str:
    """Where the pack's rendered prompt leaves the model, as the upstream's service finds it."""
    dummy = tmp / "dummy.txt"
    dummy.write_text("x", encoding="utf-8")
    engine = ReplayEngine([dummy])
    try:
        pack = resolve_pack(pack_name, require_model=False)
        request = openai_api.to_chat_request(validate(openai_api.ChatBody, body(ASK)))
        return start_state(Service(engine, pack).render(request), pack.family)
    finally:
        engine.close()


def write_leak_recording(path: Path, pack: str, start: str, family: str, text: str) -> None:
    """A session file (recording format version 1, written by hand) of one request asking
    LEAK_ASK, answered with `text` and parsed with `family`."""
    rid = "leak-1"
    records = [
        {"format": "prism-session", "version": 1, "created": "2025-01-01T00:00:00+00:00",
         "model": "leaky", "pack": pack},
        {"type": "request", "id": rid, "t": 0.0, "request": body(LEAK_ASK) | {"stream": False},
         "prompt": "", "start_state": start, "api": "openai", "family": family,
         "stream_tools": True, "tools": [WEATHER]},
        *({"type": "token", "id": rid, "i": i, "tok": i, "text": piece, "t": 0.0}
          for i, piece in enumerate(split_text(text))),
        {"type": "finish", "id": rid, "reason": "stop", "timings": {}, "result": None},
    ]
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records),
                    encoding="utf-8")


@pytest.fixture(scope="module")
def pairs(tmp_path_factory) -> dict[str, Pair]:
    tmp = tmp_path_factory.mktemp("tap_families")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs: list[subprocess.Popen] = []
    logs: dict[int, Path] = {}  # pid -> the process's output

    def start(name: str, args: list[str]) -> subprocess.Popen:
        log = tmp / f"{name}.log"
        with log.open("w") as out:
            proc = subprocess.Popen([sys.executable, "-m", "app", "serve", *args,
                                     "--log-level", "warning"],
                                    cwd=tmp, env=env, stdout=out, stderr=subprocess.STDOUT)
        procs.append(proc)
        logs[proc.pid] = log
        return proc

    def wait_all(started: list[tuple[str, subprocess.Popen]]) -> None:
        for url, proc in started:
            with httpx.Client(base_url=url, timeout=10) as http:
                try:
                    wait_healthy(http, proc, timeout=180)
                except AssertionError as e:
                    said = logs[proc.pid].read_text(errors="replace")[-2000:]
                    raise AssertionError(f"{proc.args}: {e}\n{said}") from None

    made: dict[str, Pair] = {}
    try:
        ups = []
        for fam in FAMILIES:
            family = families.get(fam)
            pack = family.pack
            st = prompt_start(pack, tmp)
            reasoning = REASONING if family.writer.reasoning_close else None  # Llama 3: none
            output = family.writer.write(reasoning, ANSWER, [CALL], opened=st == "reasoning")
            clean = tmp / f"{fam}.txt"
            clean.write_text(output, encoding="utf-8")
            leak = tmp / f"{fam}-leak.jsonl"
            write_leak_recording(leak, pack, st, leaky_family(fam), output)
            port = free_port()
            proc = start(f"{fam}-upstream", ["--replay", str(clean), str(leak), "--pack", pack,
                                             "--port", str(port), "--no-record"])
            url = f"http://127.0.0.1:{port}"
            ups.append((url, proc))
            made[fam] = Pair(fam, pack, st, output, url, "", tmp / f"{fam}-tap.jsonl")
        wait_all(ups)
        taps = []
        for pair in made.values():
            port = free_port()
            proc = start(f"{pair.family}-tap", [
                "--upstream", pair.upstream, "--tap", "--pack", pair.pack, "--port", str(port),
                "--record-to", str(pair.record)])
            pair.tap = f"http://127.0.0.1:{port}"
            taps.append((pair.tap, proc))
        wait_all(taps)
        yield made
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)


def stream(url: str, ask: str) -> bytes:
    with httpx.Client(base_url=url, timeout=30) as http, \
            http.stream("POST", "/v1/chat/completions", json=body(ask)) as resp:
        assert resp.status_code == 200, resp.read()
        assert resp.headers["content-type"].startswith("text/event-stream")
        return resp.read()


# What differs between two requests to the same replay: the reply's id, its time, its timings.
_VOLATILE = re.compile(rb'"(id|created)":("[^"]*"|\d+)|"timings":\{[^{}]*\}')


def steady(raw: bytes) -> bytes:
    return _VOLATILE.sub(lambda m: m.group(0).split(b":", 1)[0] + b":_", raw)


def fold(raw: bytes) -> dict:
    """What a client makes of a chat.completion.chunk stream."""
    out: dict = {"reasoning": "", "content": "", "calls": {}, "finish": None}
    for line in raw.decode("utf-8").splitlines():
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        for choice in json.loads(line[6:]).get("choices") or ():
            d = choice.get("delta") or {}
            out["reasoning"] += d.get("reasoning_content") or ""
            out["content"] += d.get("content") or ""
            for tc in d.get("tool_calls") or ():
                call = out["calls"].setdefault(tc["index"], {"name": "", "arguments": ""})
                call["name"] += (tc.get("function") or {}).get("name") or ""
                call["arguments"] += (tc.get("function") or {}).get("arguments") or ""
            out["finish"] = choice.get("finish_reason") or out["finish"]
    return out


def recorded(pair: Pair, ask: str):
    """The tap's recorded request that asked `ask`, once it finished."""
    found = []

    def finished() -> bool:
        if not pair.record.exists():
            return False
        found[:] = [r for r in read_session(pair.record, strict=False).requests
                    if r.request["messages"][-1]["content"] == ask and r.finish is not None]
        return bool(found)

    wait_until(finished, 10, 0.05, f"the tap's recording of {ask!r}")
    (req,) = found
    return req


@pytest.mark.parametrize("family", FAMILIES)
def test_the_tap_relays_the_upstream_and_reads_the_familys_call(pairs, family):
    pair = pairs[family]
    through = stream(pair.tap, ASK)
    direct = stream(pair.upstream, ASK)
    assert steady(through) == steady(direct)  # the upstream's bytes, unchanged
    got = fold(through)
    assert [(c["name"], json.loads(c["arguments"])) for c in got["calls"].values()] == [
        ("get_weather", {"city": "Paris"})]  # the upstream's parser read its call
    assert got["finish"] == "tool_calls"

    req = recorded(pair, ASK)
    assert req.start_state == pair.start and req.family == family
    assert req.outcome == ("stop", None)  # how the reply ended; the calls make the result's
    # Prism rebuilt the output in the family's own syntax: as the upstream's model wrote it.
    assert req.text == pair.output
    res = req.result
    reasoning = REASONING if families.get(family).writer.reasoning_close else ""
    assert (res["reasoning"], res["content"]) == (reasoning, ANSWER)
    assert (got["reasoning"], got["content"]) == (reasoning, ANSWER)
    assert [(c["name"], c["arguments"]) for c in res["tool_calls"]] == [
        ("get_weather", {"city": "Paris"})]
    assert res["finish_reason"] == "tool_calls"
    assert res["anomalies"].get(UPSTREAM_LEAK, 0) == 0
    assert not any(res["anomalies"].values()), res["anomalies"]


@pytest.mark.parametrize("family", FAMILIES)
def test_a_call_the_upstream_returned_as_text_is_flagged(pairs, family):
    pair = pairs[family]
    got = fold(stream(pair.tap, LEAK_ASK))
    assert got["calls"] == {} and got["finish"] == "stop"  # the upstream missed the call...
    assert "get_weather" in got["content"]  # ...and returned it as text

    req = recorded(pair, LEAK_ASK)
    res = req.result
    assert res["anomalies"][UPSTREAM_LEAK] == 1
    assert [(c["name"], c["arguments"]) for c in res["tool_calls"]] == [
        ("get_weather", {"city": "Paris"})]  # Prism's own reading found it
    assert res["finish_reason"] == "tool_calls"
