"""What checking call arguments against the tool's schema (engine/chat/arguments.py) costs on
the per-token path: one output (reasoning, an answer, 20 calls that each miss a required enum)
through `TokenPipeline`, without and with the request's tools. Prints the best of 20 runs; a
figure to read, not a test. Main thread only.

    python bench/argument_check.py
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from engine.backends.base import Token
from engine.parse.reading import Reading
from engine.pipeline import TokenPipeline
from engine.record.replay import split_text

TOOLS = ({"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object",
    "properties": {"city": {"type": "string"}, "days": {"type": "integer"},
                   "units": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
    "required": ["city", "days", "units"]}}},)
CALL = ("<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
        "<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>\n")
TEXT = ("Some reasoning words here. " * 40 + "\n</think>\n\n"
        + "An answer sentence goes on. " * 200 + CALL * 20)


def main() -> None:
    toks = [Token(i, p, 0.0) for i, p in enumerate(split_text(TEXT))]
    reading = Reading(family="qwen-xml", tools=TOOLS, tools_declared=True, stream_tools=True)
    for tools in ((), TOOLS):
        best = float("inf")
        for _ in range(20):
            pipe = TokenPipeline("r", reading.parser(), filters=reading.filters(), tools=tools)
            t0 = time.perf_counter()
            for tok in toks:
                pipe.feed(tok)
            pipe.finish()
            best = min(best, time.perf_counter() - t0)
        print(f"tools {'declared' if tools else 'none    '}: {len(toks)} tokens, 20 calls: "
              f"{best * 1e3:.2f} ms, {best / len(toks) * 1e6:.2f} us/token")


if __name__ == "__main__":
    main()
