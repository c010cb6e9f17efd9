"""Parser benchmark: 1-character feeds per second on a realistic 1 MB output, and the cost of
1 MB over the cost of 100 kB (linearity), for the Qwen3 output (Qwen XML and Hermes JSON calls)
and for each model family's own markup. Prints its figures; not part of the test suite. Runs on
the main thread (the parser is driven as the engine thread drives it: one feed per token).

    python bench/parser.py [--mb 1.0] [--family NAME ...]
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from engine.parse import families as registry
from engine.parse.events import ToolCall
from engine.parse.parser import OutputParser

TOOLS = [
    {"type": "function", "function": {"name": "run", "parameters": {
        "type": "object",
        "properties": {"cmd": {"type": "string"}, "timeout": {"type": "integer"}}}}},
    {"type": "function", "function": {"name": "search", "parameters": {
        "type": "object", "properties": {"query": {"type": "string"}}}}},
]

WORDS = (
    "the model writes a call when it needs data so we check the file and compare "
    "values before answering with care about `inline code` and <b>tags</b>"
).split()


def _prose(rng: random.Random, n: int) -> str:
    lines = []
    for _ in range(n):
        lines.append(" ".join(rng.choice(WORDS) for _ in range(rng.randint(6, 18))) + ".")
    return "\n".join(lines)


def realistic_output(size: int, seed: int = 0) -> str:
    """Reasoning, `</think>`, an answer with fenced code, and several calls, repeated."""
    rng = random.Random(seed)
    parts = [_prose(rng, 6), "\n</think>\n\n"]
    i = 0
    while sum(map(len, parts)) < size:
        i += 1
        parts.append(_prose(rng, 4))
        parts.append("\n\n```python\nprint('<tool_call>')\nx = [1, 2]\n```\n\n")
        if i % 2:
            parts.append(
                "<tool_call>\n<function=run>\n<parameter=cmd>\nls -la /tmp && echo done\n"
                "</parameter>\n<parameter=timeout>\n30\n</parameter>\n</function>\n</tool_call>\n"
            )
        else:
            parts.append("<tool_call>\n" + json.dumps(
                {"name": "search", "arguments": {"query": "why is the sky blue " * 3}}
            ) + "\n</tool_call>\n")
    return "".join(parts)[:size]


def _harmony(rng: random.Random, i: int) -> str:
    head = "<|channel|>analysis<|message|>" + _prose(rng, 4) + "<|end|><|start|>assistant"
    if i % 2:
        args = {"cmd": "ls -la /tmp && echo done", "timeout": 30}
        return (head + "<|channel|>commentary to=functions.run <|constrain|>json<|message|>"
                + json.dumps(args) + "<|call|>")
    return (head + "<|channel|>final<|message|>" + _prose(rng, 3)
            + "\n\n```python\nprint('<|channel|>')\n```\n<|return|>")


def _think(rng: random.Random, i: int, call: str) -> str:
    """A `<think>` family's output, turn by turn: reasoning first, then answer text with
    fenced code, every other turn a call."""
    out = _prose(rng, 6) + "\n</think>\n\n" if i == 1 else ""
    out += _prose(rng, 4) + "\n\n```python\nprint('<tool_call>')\n```\n\n"
    return out + (call + "\n" if i % 2 else "")


def _deepseek(rng: random.Random, i: int) -> str:
    args = json.dumps({"cmd": "ls -la /tmp && echo done", "timeout": 30})
    return _think(rng, i, "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>run<｜tool▁sep｜>" + args
                  + "<｜tool▁call▁end｜><｜tool▁calls▁end｜>")


def _dsml(rng: random.Random, i: int) -> str:
    p = '<｜DSML｜parameter name="'
    return _think(rng, i, '<｜DSML｜function_calls>\n<｜DSML｜invoke name="run">\n'
                  f'{p}cmd" string="true">ls -la /tmp && echo done</｜DSML｜parameter>\n'
                  f'{p}timeout" string="false">30</｜DSML｜parameter>\n'
                  "</｜DSML｜invoke>\n</｜DSML｜function_calls>")


def _glm(rng: random.Random, i: int) -> str:
    return _think(rng, i, "<tool_call>run\n<arg_key>cmd</arg_key>\n<arg_value>ls -la /tmp && "
                  "echo done</arg_value>\n<arg_key>timeout</arg_key>\n<arg_value>30"
                  "</arg_value>\n</tool_call>")


def _minimax(rng: random.Random, i: int) -> str:
    return _think(rng, i, '<minimax:tool_call>\n<invoke name="run">\n<parameter name="cmd">'
                  'ls -la /tmp && echo done</parameter>\n<parameter name="timeout">30'
                  "</parameter>\n</invoke>\n</minimax:tool_call>")


def _kimi(rng: random.Random, i: int) -> str:
    args = json.dumps({"cmd": "ls -la /tmp && echo done", "timeout": 30})
    return _think(rng, i, "<|tool_calls_section_begin|><|tool_call_begin|>functions.run:0"
                  f"<|tool_call_argument_begin|>{args}<|tool_call_end|>"
                  "<|tool_calls_section_end|>")


def _mistral(rng: random.Random, i: int) -> str:
    head = "[THINK]" + _prose(rng, 6) + "[/THINK]\n\n" if i == 1 else ""
    text = head + _prose(rng, 4) + " See [the docs](https://example.com) too.\n\n"
    args = json.dumps({"cmd": "ls -la /tmp && echo done", "timeout": 30})
    return text + (f"[TOOL_CALLS]run[ARGS]{args}\n" if i % 2 else "")


def _gemma4(rng: random.Random, i: int) -> str:
    head = "<|channel>thought\n" + _prose(rng, 6) + "<channel|>" if i == 1 else ""
    text = head + _prose(rng, 4) + "\n\n```python\nprint('<|tool_call>')\n```\n\n"
    q = '<|"|>'
    call = f"<|tool_call>call:run{{cmd:{q}ls -la /tmp && echo done{q},timeout:30}}<tool_call|>"
    return text + (call + "\n" if i % 2 else "")


def _llama3(rng: random.Random, i: int) -> str:
    text = _prose(rng, 4) + ' Config: {"debug": true}.\n\n```json\n{"name": "x"}\n```\n\n'
    args = {"cmd": "ls -la /tmp && echo done", "timeout": 30}
    call = json.dumps({"name": "run", "parameters": args})
    return text + (("<|python_tag|>" if i % 4 == 1 else "") + call + "\n" if i % 2 else "")


# family -> (start state, one turn of realistic output); turns repeat up to the size asked.
FAMILIES = {
    "harmony": ("content", _harmony),
    "deepseek": ("reasoning", _deepseek),
    "dsml": ("reasoning", _dsml),
    "glm": ("reasoning", _glm),
    "kimi-k2": ("reasoning", _kimi),
    "minimax-xml": ("reasoning", _minimax),
    "mistral": ("content", _mistral),
    "gemma4": ("content", _gemma4),
    "llama3-json": ("content", _llama3),
}


# The worst case for hold-back: a call body that never ends, one long value of prose. Each
# family's opener up to the value.
LONG_BODY = {
    "qwen-xml": "<tool_call>\n<function=run>\n<parameter=cmd>\n",
    "hermes-json": '<tool_call>\n{"name": "run", "arguments": {"cmd": "',
    "harmony": '<|channel|>commentary to=functions.run json<|message|>{"cmd": "',
    "deepseek": '<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>run<｜tool▁sep｜>{"cmd": "',
    "dsml": '<｜DSML｜function_calls><｜DSML｜invoke name="run"><｜DSML｜parameter name="cmd" '
            'string="true">',
    "glm": "<tool_call>run<arg_key>cmd</arg_key><arg_value>",
    "kimi-k2": '<|tool_calls_section_begin|><|tool_call_begin|>functions.run:0'
               '<|tool_call_argument_begin|>{"cmd": "',
    "minimax-xml": '<minimax:tool_call><invoke name="run"><parameter name="cmd">',
    "mistral": '[TOOL_CALLS]run[ARGS]{"cmd": "',
    "gemma4": '<|tool_call>call:run{cmd:<|"|>',
    "llama3-json": '{"name": "run", "parameters": {"cmd": "',
}


# The other worst case: a long run of whitespace right after a call's closer, where the reader
# waits for what may still belong to the call (a section's end, the next parameter).
AFTER_CLOSER = {
    "qwen-xml": "<tool_call>\n<function=run>\n<parameter=cmd>\nls\n</parameter>",
    "hermes-json": '<tool_call>\n{"name": "run", "arguments": {"cmd": "ls"}}',
    "harmony": '<|channel|>commentary to=functions.run json<|message|>{"cmd": "ls"}',
    "deepseek": '<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>run<｜tool▁sep｜>{"cmd": "ls"}'
                "<｜tool▁call▁end｜>",
    "dsml": '<｜DSML｜function_calls><｜DSML｜invoke name="run"></｜DSML｜invoke>',
    "glm": "<tool_call>run<arg_key>cmd</arg_key><arg_value>ls</arg_value>",
    "kimi-k2": '<|tool_calls_section_begin|><|tool_call_begin|>functions.run:0'
               '<|tool_call_argument_begin|>{"cmd": "ls"}<|tool_call_end|>',
    "minimax-xml": '<minimax:tool_call><invoke name="run"></invoke>',
    "mistral": '[TOOL_CALLS][{"name": "run", "arguments": {"cmd": "ls"}}',
    "gemma4": "<|tool_call>call:run{cmd:1}",
    "llama3-json": '{"name": "run", "parameters": {"cmd": "ls"}}',
}


# Every other family: its output written by its own writer (its record, engine/parse/families):
# reasoning in the first turn, answer text with fenced code quoting the family's call opener,
# and a call every other turn; the worst cases cut from a written call.
_MARK = "\x00"


def _written(name: str):
    writer = registry.get(name).writer
    opener = (registry.get(name).markers.calls or ("<tool_call>",))[0]
    args = {"cmd": "ls -la /tmp && echo done", "timeout": 30}

    def turn(rng: random.Random, i: int) -> str:
        text = _prose(rng, 4) + f"\n\n```python\nprint('{opener}')\n```\n\n"
        calls = [ToolCall(f"call_{i}", "run", args, 0)] if i % 2 else []
        return writer.write(_prose(rng, 6) if i == 1 else None, text, calls) + "\n"
    return turn


for _fam in registry.REGISTRY.values():
    if _fam.name not in ("qwen-xml", "hermes-json") and _fam.name not in FAMILIES:
        FAMILIES[_fam.name] = ("content", _written(_fam.name))
        _call = _fam.writer.write_call(ToolCall("call_0", "run", {"cmd": _MARK}, 0))
        LONG_BODY.setdefault(_fam.name, _call.split(_MARK)[0])
        AFTER_CLOSER.setdefault(_fam.name, _fam.writer.write_call(
            ToolCall("call_0", "run", {"cmd": "ls"}, 0)))


def worst_cases(family: str, size: int) -> None:
    """cost(size/5)/cost(size/50) for one unfinished long value and for whitespace after a
    closer, fed a character at a time: 10 is linear."""
    read_as = "auto" if family in ("qwen-xml", "hermes-json") else family
    texts = {"whitespace after a closer": AFTER_CLOSER[family] + " " * (size // 5)}
    if family in LONG_BODY:
        texts["one unfinished call body"] = LONG_BODY[family] + "word " * (size // 25)
    for what, long in texts.items():
        t_small = min(feed_chars(long[: len(long) // 10], True, read_as, "content")
                      for _ in range(5))
        t_big = feed_chars(long, True, read_as, "content")
        kb = len(long) // 1000
        print(f"{family:12} {what}, {kb} kB: cost({kb} kB)/cost({kb // 10} kB) = "
              f"{t_big / t_small:.2f}")


def family_output(family: str, size: int, seed: int = 0) -> str:
    rng = random.Random(seed)
    turn = FAMILIES[family][1]
    parts, total, i = [], 0, 0
    while total < size:
        i += 1
        parts.append(turn(rng, i))
        total += len(parts[-1])
    return "".join(parts)[:size]


def feed_chars(text: str, stream_tools: bool, family: str = "auto",
               start: str = "reasoning") -> float:
    p = OutputParser(start=start, family=family, tools=TOOLS, stream_tools=stream_tools,
                     id_prefix="")
    feed = p.feed
    # CPU time, not wall time: on a shared machine the load would otherwise be the figure.
    t0 = time.process_time()
    for ch in text:
        feed(ch)
    p.finish()
    return time.process_time() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=float, default=1.0)
    ap.add_argument("--family", action="append", choices=sorted(FAMILIES),
                    help="only these families (default: the Qwen3 output and every family)")
    args = ap.parse_args()
    if args.family:
        for fam in args.family:
            bench_family(fam, int(args.mb * 1_000_000))
        return
    big = realistic_output(int(args.mb * 1_000_000))
    small = big[: len(big) // 10]
    print(f"output: {len(big):,} chars, {big.count('<tool_call>')} tool-call tags, "
          f"{big.count('```') // 2} fenced blocks")
    for st in (False, True):
        # best of 9 runs of 100 kB and 3 of 1 MB: the ratio compares costs, not noise
        t_small = min(feed_chars(small, st) for _ in range(9))
        t_big = min(feed_chars(big, st) for _ in range(3))
        print(f"stream_tools={st!s:5}: {len(big) / t_big:,.0f} feeds/s (1-char feeds, 1 MB); "
              f"cost(1 MB)/cost(100 kB) = {t_big / t_small:.2f}")
    p = OutputParser(start="reasoning", tools=TOOLS, id_prefix="")
    t0 = time.process_time()
    p.feed(big)
    p.finish()
    print(f"whole 1 MB in one feed: {(time.process_time() - t0) * 1000:.1f} ms")
    worst_cases("qwen-xml", int(args.mb * 1_000_000))
    worst_cases("hermes-json", int(args.mb * 1_000_000))
    for fam in FAMILIES:
        bench_family(fam, int(args.mb * 1_000_000))


def bench_family(family: str, size: int) -> None:
    start = FAMILIES[family][0]
    big = family_output(family, size)
    small = big[: len(big) // 10]
    for st in (False, True):
        t_small = min(feed_chars(small, st, family, start) for _ in range(9))
        t_big = min(feed_chars(big, st, family, start) for _ in range(3))
        print(f"{family:12} stream_tools={st!s:5}: {len(big) / t_big:,.0f} feeds/s; "
              f"cost(1 MB)/cost(100 kB) = {t_big / t_small:.2f}")
    worst_cases(family, size)


if __name__ == "__main__":
    main()
