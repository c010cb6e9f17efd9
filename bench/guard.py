"""Issue 22's guard trial: what the call guard (engine/backends/llama/guard.py) does to a small
model's calls, and what it costs. The default model (SmolLM2 under its default pack), three
declared tools, a conversation whose earlier turns call each tool twice, then a new question
that leads to a call; temperature 0.8, seeds 1..N. Each seed is asked twice in a row, guard off
and guard on (`guard_calls` False / True; which goes first alternates), so both arms see the
same prompts, seeds and machine load. Prints, per arm: replies, calls made, malformed /
unfinished / unknown-tool / invalid_arguments per 100 calls, guided tokens; the time per token
inside calls and outside them (medians) and the guard's cost as the ratio of the two arms and,
paired by seed, as the median ratio of each seed's two runs (`paired`: the cleaner figure);
the anomalies' texts. A figure to read, not a test.

    python bench/guard.py [--requests 200 | --quick] [--max-tokens 96] [--json FILE]

A call attempt is a complete call (`tool_calls`, a call to an unknown tool included) or one the
parser gave up on (`malformed_call`, `unfinished_call`). Time per token: the difference of
consecutive tokens' decode times (`Token.t`; the first token, which carries the prompt, is
left out), each token inside a call when its text ends within a call's span as the parse events
give it (tool_start / tool_args / tool_call), outside otherwise. One request at a time
(`--parallel 1`), so no neighbour shares a decode step. Runs the engine on its own thread, the
rest on the main one.
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys
import time
from bisect import bisect_right
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from engine.backends.llama.engine import LlamaEngine
from engine.chat.packs import DEFAULT_PACK, resolve_pack
from engine.chat.request import ChatRequest, Message, Sampling
from engine.metrics import Metrics
from engine.parse.events import (
    INVALID_ARGUMENTS,
    MALFORMED_CALL,
    TOOL_ARGS,
    TOOL_CALL,
    TOOL_START,
    UNFINISHED_CALL,
    UNKNOWN_TOOL,
)
from engine.service import Service


def tool(name: str, description: str, properties: dict) -> dict:
    return {"type": "function", "function": {
        "name": name, "description": description,
        "parameters": {"type": "object", "properties": properties,
                       "required": list(properties)}}}


TOOLS = (
    tool("get_weather", "The weather forecast for a city.",
         {"city": {"type": "string"}, "days": {"type": "integer"},
          "units": {"type": "string", "enum": ["celsius", "fahrenheit"]}}),
    tool("set_alarm", "Set an alarm clock.",
         {"hour": {"type": "integer", "enum": [5, 6, 7, 8, 9]},
          "mode": {"type": "string", "enum": ["loud", "quiet"]}}),
    tool("search", "Search the web.",
         {"query": {"type": "string"}, "limit": {"type": "integer"}}),
)
# (question, tool, arguments, the tool's answer, the assistant's reply): two per tool.
EXAMPLES = (
    ("Weather in Paris for 2 days?", "get_weather",
     {"city": "Paris", "days": 2, "units": "celsius"}, "Sunny.", "It will be sunny in Paris."),
    ("Wake me at 6, loudly.", "set_alarm", {"hour": 6, "mode": "loud"}, "Alarm set.",
     "Your alarm is set for 6."),
    ("Search for pasta recipes, 5 results.", "search", {"query": "pasta recipes", "limit": 5},
     "5 results.", "I found 5 pasta recipes."),
    ("Weather in Boston for 3 days?", "get_weather",
     {"city": "Boston", "days": 3, "units": "fahrenheit"}, "Rain.", "It will rain in Boston."),
    ("Alarm at 8, quiet please.", "set_alarm", {"hour": 8, "mode": "quiet"}, "Alarm set.",
     "Your alarm is set for 8."),
    ("Find train times to Lyon, 3 results.", "search",
     {"query": "train times to Lyon", "limit": 3}, "3 results.", "Here are 3 trains to Lyon."),
)
QUESTIONS = (
    "Weather in Rome for 4 days?", "Wake me at 7, quietly.",
    "Search for cheap flights, 4 results.", "Weather in Oslo for 5 days?",
    "Set an alarm for 9, loud.", "Find museums in Madrid, 2 results.",
    "Weather in Tokyo for 1 day?", "Alarm at 5, quiet.", "Search for bike shops, 6 results.",
)
CALL_KINDS = (TOOL_START, TOOL_ARGS, TOOL_CALL)


def history() -> tuple[Message, ...]:
    out: list[Message] = []
    for i, (question, name, args, answer, reply) in enumerate(EXAMPLES):
        call = {"id": f"call_{i}", "type": "function",
                "function": {"name": name, "arguments": args}}
        out += [Message("user", question), Message("assistant", "", tool_calls=(call,)),
                Message("tool", answer, tool_call_id=f"call_{i}"), Message("assistant", reply)]
    return tuple(out)


def gaps(run) -> tuple[list[float], list[float]]:
    """Seconds per token (after the first) inside calls and outside them."""
    spans = sorted(ev.span for ev in run.events if ev.kind in CALL_KINDS)
    starts = [a for a, _ in spans]
    inside: list[float] = []
    outside: list[float] = []
    toks, end = run.tokens, len(run.tokens[0].text) if run.tokens else 0
    for prev, tok in itertools.pairwise(toks):
        end += len(tok.text)  # where this token's text ends in the output
        k = bisect_right(starts, end - 1) - 1
        within = k >= 0 and spans[k][0] < end <= spans[k][1]
        (inside if within else outside).append(tok.t - prev.t)
    return inside, outside


def paired(pairs: list[tuple]) -> dict:
    """The guard's cost from the two runs of each seed. Outside calls: the seeds where neither
    run opened a call, so both wrote the very same tokens and only the guard's per-token check
    differs (decode time from the first token to the last, on over off). Inside calls: the
    seeds where both runs called (median time per call token, on over off). Medians of the
    per-seed ratios, so one stretched run is one outlier."""
    same, calls = [], []
    for off, on in pairs:
        (in_off, out_off), (in_on, out_on) = gaps(off), gaps(on)
        if not in_off and not in_on and [t.id for t in off.tokens] == [t.id for t in on.tokens] \
                and len(off.tokens) > 8:
            same.append(sum(out_on) / sum(out_off))
        if in_off and in_on:
            calls.append(statistics.median(in_on) / statistics.median(in_off))

    def pct(xs: list[float]) -> str:
        return f"{100 * (statistics.median(xs) - 1):+.1f}%" if xs else "–"

    return {"outside_calls": {"seeds": len(same), "cost": pct(same)},
            "inside_calls": {"seeds": len(calls), "cost": pct(calls)}}


class Arm:
    """One arm's counts and token gaps."""

    def __init__(self) -> None:
        self.replies = self.with_calls = self.calls = self.guided = 0
        self.anomalies = dict.fromkeys((MALFORMED_CALL, UNFINISHED_CALL, UNKNOWN_TOOL,
                                        INVALID_ARGUMENTS), 0)
        self.inside: list[float] = []  # seconds per token
        self.outside: list[float] = []
        self.why: Counter[str] = Counter()  # what the anomalies said (invalid_arguments...)

    def add(self, run) -> None:
        res = run.result
        self.replies += 1
        attempts = len(res.tool_calls) + res.anomalies.get(MALFORMED_CALL, 0) + \
            res.anomalies.get(UNFINISHED_CALL, 0)
        self.calls += attempts
        self.with_calls += bool(attempts)
        for k in self.anomalies:
            self.anomalies[k] += res.anomalies.get(k, 0)
        self.why.update(f"{ev.anomaly}: {ev.text.strip()[:70]}" for ev in run.events
                        if ev.anomaly in self.anomalies)
        self.guided += sum(1 for t in run.tokens if t.guided is not None)
        inside, outside = gaps(run)
        self.inside += inside
        self.outside += outside

    def per_100(self, kind: str) -> float:
        return 100.0 * self.anomalies[kind] / self.calls if self.calls else 0.0

    def summary(self) -> dict:
        def ms(xs: list[float]) -> float | None:
            # The median: a gap the machine's other load stretched is one outlier, not a cost.
            return round(1000 * statistics.median(xs), 3) if xs else None

        return {"replies": self.replies, "replies_with_calls": self.with_calls,
                "calls": self.calls, "guided_tokens": self.guided,
                "per_100_calls": {k: round(self.per_100(k), 2) for k in self.anomalies},
                "counts": dict(self.anomalies),
                "tokens_inside_calls": len(self.inside), "ms_per_token_inside": ms(self.inside),
                "tokens_outside_calls": len(self.outside),
                "ms_per_token_outside": ms(self.outside),
                "anomaly_texts": dict(self.why.most_common(8))}


def cost(off: float | None, on: float | None) -> str:
    return "–" if not off or not on else f"{100 * (on / off - 1):+.1f}%"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=200, help="seeds, each asked off and on")
    ap.add_argument("--quick", action="store_true", help="40 seeds")
    ap.add_argument("--max-tokens", type=int, default=96)
    ap.add_argument("--json", type=Path, help="also write the figures here")
    args = ap.parse_args()
    n = 40 if args.quick else args.requests
    pack = resolve_pack(DEFAULT_PACK)
    engine = LlamaEngine(pack.gguf, n_ctx=4096, parallel=1)
    assert engine.ready.wait(120) and engine.load_error is None, engine.load_error
    svc = Service(engine, pack, metrics=Metrics(engine))
    arms = {False: Arm(), True: Arm()}
    base = history()
    pairs = []
    t0 = time.perf_counter()
    try:
        for seed in range(1, n + 1):
            question = QUESTIONS[(seed - 1) % len(QUESTIONS)]
            pair = {}
            # Which arm goes first alternates by seed: the second run of a seed finds its whole
            # prompt cached and decodes a few percent faster, an order effect, not the guard's.
            for guard in ((False, True) if seed % 2 else (True, False)):
                req = ChatRequest(messages=(*base, Message("user", question)), tools=TOOLS,
                                  max_tokens=args.max_tokens, guard_calls=guard,
                                  sampling=Sampling(temperature=0.8, seed=seed))
                run = svc.submit(req)
                run.wait(600)
                arms[guard].add(run)
                pair[guard] = run
            pairs.append((pair[False], pair[True]))
    finally:
        engine.close()
    off, on = (arms[g].summary() for g in (False, True))
    doc = {"model": pack.gguf.name, "pack": pack.name, "seeds": n, "temperature": 0.8,
           "max_tokens": args.max_tokens, "seconds": round(time.perf_counter() - t0, 1),
           "guard_off": off, "guard_on": on,
           "cost_inside_calls": cost(off["ms_per_token_inside"], on["ms_per_token_inside"]),
           "cost_outside_calls": cost(off["ms_per_token_outside"], on["ms_per_token_outside"]),
           "paired": paired(pairs)}
    print(f"model {doc['model']}, pack {doc['pack']}: {n} seeds x (guard off, guard on), "
          f"temperature 0.8, max_tokens {args.max_tokens}, {doc['seconds']} s")
    rows = [("replies", "replies"), ("replies with calls", "replies_with_calls"),
            ("calls", "calls"), ("guided tokens", "guided_tokens")]
    print(f"{'':34}{'guard off':>12}{'guard on':>12}")
    for label, key in rows:
        print(f"{label:34}{off[key]:>12}{on[key]:>12}")
    for kind in arms[False].anomalies:
        label = f"{kind} /100 calls"
        print(f"{label:34}{off['per_100_calls'][kind]:>12.2f}{on['per_100_calls'][kind]:>12.2f}")
    for where in ("inside", "outside"):
        a, b = off[f"ms_per_token_{where}"], on[f"ms_per_token_{where}"]
        label = f"ms/token {where} calls (n off/on)"
        counts = f"({off[f'tokens_{where}_calls']}/{on[f'tokens_{where}_calls']})"
        print(f"{label:34}{a or 0:>12.2f}{b or 0:>12.2f}  {counts}  cost "
              f"{doc[f'cost_{where}_calls']}")
    for where, fig in doc["paired"].items():
        print(f"paired cost {where.replace('_', ' ')}: {fig['cost']} over {fig['seeds']} seeds")
    for guard, arm in ((False, off), (True, on)):
        for text, k in arm["anomaly_texts"].items():
            print(f"  guard {'on ' if guard else 'off'} {k:4d}  {text}")
    if args.json:
        args.json.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
