"""Write resources/sessions/demo.jsonl: the bundled demo recording the README screenshot uses.

The three outputs are scripted (hand-written, not sampled from a model) and written with
`engine.record.recording.Recorder`, in the real format: prompts rendered by the built-in qwen3-xml
pack's template, outputs cut into pseudo-tokens the way `ReplayEngine` cuts plain text, a
deterministic pace of about 40 tokens/s, and each finish record's result computed by the real
parser. No top-k alternatives are recorded (they would have to be invented).

The last request shows every parser state and the failures Prism exists for: reasoning, a Qwen
XML call written inside the thinking (an implicit end of thinking), the model's late `</think>`
(a stray tag in content, dropped) and the answer.

    .venv/bin/python scripts/make_demo_session.py [OUT.jsonl]

Runs on the main thread; no model, no engine.
"""

from __future__ import annotations

import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from engine.backends.base import Finish, Timings, Token  # noqa: E402
from engine.chat.detect import start_state  # noqa: E402
from engine.chat.packs import load_pack  # noqa: E402
from engine.chat.request import ChatRequest, Message, Sampling  # noqa: E402
from engine.parse.events import result_of  # noqa: E402
from engine.parse.parser import OutputParser  # noqa: E402
from engine.record.recording import Recorder  # noqa: E402
from engine.record.replay import _piece_id, split_text  # noqa: E402

MODEL = "qwen3-xml (scripted demo)"
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "City name"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city"],
        },
    },
}

REQUESTS = [
    (
        "Hi! What can you help me with today?",
        (),
        "The user is greeting me and asking what I can do. I should answer briefly and "
        "mention a couple of concrete things.\n</think>\n\n"
        "Hello! I can answer questions, explain code, draft and edit text, and — when tools "
        "are available — look things up for you, like the current weather. What would you "
        "like to do?",
    ),
    (
        "What's the weather in Paris right now?",
        (WEATHER,),
        "The user wants the current weather in Paris. I have a get_weather tool that takes "
        "a city and an optional unit. I'll call it with Paris and celsius.\n</think>\n\n"
        "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
        "<parameter=unit>\ncelsius\n</parameter>\n</function>\n</tool_call>",
    ),
    (
        "And in Lisbon? Should I take an umbrella?",
        (WEATHER,),
        "Now the user asks about Lisbon, and whether to take an umbrella. I need the "
        "current conditions, so I should call get_weather for Lisbon in celsius, then "
        "answer the umbrella question from the precipitation.\n"
        "<tool_call>\n<function=get_weather>\n<parameter=city>\nLisbon\n</parameter>\n"
        "<parameter=unit>\ncelsius\n</parameter>\n</function>\n</tool_call>\n</think>\n\n"
        "Let me check the current weather in Lisbon for you — I'll tell you about the "
        "umbrella as soon as the forecast is in.",
    ),
]


def main(out: Path) -> None:
    pack = load_pack("qwen3-xml")
    template = pack.chat_template()
    rng = random.Random(7)
    history: list[Message] = []
    with Recorder(out, model=MODEL, pack=pack.name) as rec:
        base = time.perf_counter()
        for n, (question, tools, output) in enumerate(REQUESTS, start=1):
            history.append(Message("user", question))
            req = ChatRequest(messages=tuple(history), tools=tools, sampling=Sampling(seed=7),
                              max_tokens=1024, thinking=True, api="openai", model=MODEL)
            prompt = template.render(req.messages, tools=tools, enable_thinking=True)
            state = start_state(prompt)
            rid = f"demo-{n}"
            t0 = base + 4.0 * n
            rec.request(rid, req, prompt, start_state=state, api="openai", family=pack.family,
                        stream_tools=True, tools=tools, t0=t0)
            parser = OutputParser(start=state, family=pack.family, tools=tools,
                                  stream_tools=True, id_prefix=f"demo{n}")
            events, t = [], 0.18 + 0.15 * rng.random()  # time to first token
            first = t
            pieces = split_text(output)
            for i, piece in enumerate(pieces):
                rec.token(rid, i, Token(_piece_id(piece), piece, t0 + t))
                events += parser.feed(piece)
                t += rng.uniform(0.018, 0.032)  # ~40 tokens/s
            events += parser.finish()
            timings = Timings(queue_ms=0.0, prompt_ms=first * 1000, ttft_ms=first * 1000,
                              decode_ms=(t - first) * 1000, prompt_tokens=len(split_text(prompt)),
                              output_tokens=len(pieces))
            rec.finish(rid, Finish("stop", timings), result_of(events, "stop"))
            history.append(Message("assistant", output))
    print(f"wrote {out} ({len(REQUESTS)} requests)")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "resources/sessions/demo.jsonl")
