"""Issue 22's trial, as a new user would run it: the default model (SmolLM2 under its default
pack), a conversation whose earlier turns call `get_weather(city, days, units)` (`units` a
required enum), then new questions. Prints how many replies called the tool and how many of
those calls Prism counted as `invalid_arguments`, with the failures by message. A figure to
read, not a test (sampling varies). Runs the engine on its own thread, the rest on the main one.

    python bench/invalid_arguments.py [--requests 30] [--seed 0]
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from engine.backends.llama.engine import LlamaEngine
from engine.chat.packs import DEFAULT_PACK, resolve_pack
from engine.chat.request import ChatRequest, Message, Sampling
from engine.metrics import Metrics
from engine.parse.events import INVALID_ARGUMENTS
from engine.service import Service

TOOLS = ({"type": "function", "function": {
    "name": "get_weather", "description": "The weather forecast for a city.",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string"}, "days": {"type": "integer", "minimum": 1},
        "units": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
        "required": ["city", "days", "units"]}}},)


def turn(i: int, city: str, days: int, units: str) -> tuple[Message, ...]:
    call = {"id": f"call_{i}", "type": "function", "function": {
        "name": "get_weather", "arguments": {"city": city, "days": days, "units": units}}}
    return (Message("user", f"Weather in {city} for {days} days?"),
            Message("assistant", "", tool_calls=(call,)),
            Message("tool", f'{{"forecast": "mild", "units": "{units}"}}',
                    tool_call_id=f"call_{i}"),
            Message("assistant", f"{city}: mild for the next {days} days."))


HISTORY = (*turn(0, "Paris", 2, "celsius"), *turn(1, "Boston", 3, "fahrenheit"))
ASKS = ("And in Rome for 4 days?", "What about Oslo, 2 days?", "Tokyo this week?",
        "Madrid for 5 days please.", "Check Berlin for 3 days.")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=30)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    pack = resolve_pack(DEFAULT_PACK)
    engine = LlamaEngine(pack.gguf, n_ctx=4096)
    svc = Service(engine, pack, metrics=Metrics(engine))
    calls = replies_with_calls = 0
    why: Counter[str] = Counter()
    try:
        for i in range(args.requests):
            q = ASKS[i % len(ASKS)]
            req = ChatRequest(messages=(*HISTORY, Message("user", q)), tools=TOOLS,
                              max_tokens=160, sampling=Sampling(seed=args.seed + i))
            run = svc.submit(req)
            res = run.wait(300)
            calls += len(res.tool_calls)
            replies_with_calls += bool(res.tool_calls)
            why.update(e.text for e in run.events if e.anomaly == INVALID_ARGUMENTS)
    finally:
        engine.close()
    total = svc.metrics.snapshot()["totals"]["anomalies"]
    print(f"model {pack.gguf.name}, pack {pack.name}: {args.requests} requests, "
          f"{replies_with_calls} with calls, {calls} calls")
    print(f"invalid_arguments counted: {total[INVALID_ARGUMENTS]} "
          f"(unknown_tool {total['unknown_tool']}, malformed_call {total['malformed_call']}, "
          f"unfinished_call {total['unfinished_call']})")
    for text, n in why.most_common():
        print(f"  {n:3d}  {text}")


if __name__ == "__main__":
    main()
