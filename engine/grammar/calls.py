"""Each family's call markup as GBNF: what `tool_choice` forces a pack's model to write.

Owns `Format` (one call, the list's opener, separator and closer) and `FORMATS` (dialect ->
Format); engine/grammar/tools.py documents the markup each family gets. Pure text
building on the caller's thread (the service's).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass

from engine.grammar.writer import NL, PREFIX, Writer, _lit
from engine.parse.families import deepseek, dsml, gemma4, harmony, kimi_k2, minimax_xml, mistral
from engine.parse.markers import CALL_CLOSE, CALL_OPEN

INVOKE_CLOSE = "</invoke>\n"  # MiniMax's

def _params(fn: dict) -> dict:
    params = fn.get("parameters")
    return params if isinstance(params, dict) else {"type": "object"}


def _props(fn: dict) -> tuple[list[tuple[str, dict]], set[str]]:
    params = _params(fn)
    props = params.get("properties")
    items = [(k, v if isinstance(v, dict) else {}) for k, v in props.items()] \
        if isinstance(props, dict) else []
    required = params.get("required")
    return items, set(required) if isinstance(required, list) else set()


def _args(w: Writer, i: int, fn: dict) -> str:
    return w.json(_params(fn), f"{PREFIX}{i}-args", {"type": "object"})


def _is_raw(schema: dict) -> bool:
    """Is this property written as raw text (a string) rather than JSON?"""
    enum = schema.get("enum")
    if isinstance(enum, list) and enum:
        return all(isinstance(e, str) for e in enum)
    return schema.get("type", "string") == "string"


def _raw(w: Writer, schema: dict, closer: str) -> str:
    enum = schema.get("enum")
    if isinstance(enum, list) and enum:
        return "(" + " | ".join(_lit(e) for e in enum) + ")"
    return w.until(closer)


def _tagged(w: Writer, i: int, fn: dict, key_open: str, key_close: Callable[[bool], str],
            value_close: str, closer: str) -> str:
    """Key/value parameters for the declared properties, in order, the required ones always:
    `key_open K key_close(raw) VALUE value_close`; `closer` is the text a raw VALUE must not
    contain. A tool that declares no properties may name any keys (raw values)."""
    items, required = _props(fn)
    if not items:
        key = f"{PREFIX}{i}-key"
        w.rules[key] = "[A-Za-z0-9_.-]+"
        one = (f"{w.seq(key_open)} {key} {w.seq(key_close(True))} {w.until(closer)} "
               f"{w.seq(value_close)}")
        return f"({one})*"
    parts = []
    for j, (k, schema) in enumerate(items):
        raw = _is_raw(schema)
        value = (_raw(w, schema, closer) if raw
                 else w.json(schema, f"{PREFIX}{i}-p{j}", {}))
        one = f"{w.seq(key_open + k + key_close(raw))} {value} {w.seq(value_close)}"
        parts.append(f"({one})" + ("" if k in required else "?"))
    return " ".join(parts)


# --- the families' calls: (writer, tool index, function) -> GBNF expression ---------------------


def _hermes(w: Writer, i: int, fn: dict) -> str:
    head = CALL_OPEN + '\n{"name": ' + json.dumps(fn["name"]) + ', "arguments": '
    tail = "}\n" + CALL_CLOSE
    return f"{w.seq(head)} {_args(w, i, fn)} {w.seq(tail)}"


def _qwen(w: Writer, i: int, fn: dict) -> str:
    params = _tagged(w, i, fn, "<parameter=", lambda raw: ">\n", "\n</parameter>\n",
                     "</parameter>")
    head = f"{CALL_OPEN}\n<function={fn['name']}>\n"
    tail = "</function>\n" + CALL_CLOSE
    return f"{w.seq(head)} {params} {w.seq(tail)}"


def _harmony(w: Writer, i: int, fn: dict) -> str:
    head = f"<|channel|>commentary to=functions.{fn['name']} <|constrain|>json{harmony.MESSAGE}"
    return f"{w.seq(head)} {_args(w, i, fn)} {w.seq(harmony.CALL_END)}"


def _deepseek(w: Writer, i: int, fn: dict) -> str:
    head = deepseek.CALL_BEGIN + fn["name"] + deepseek.SEP
    return f"{w.seq(head)} {_args(w, i, fn)} {w.seq(deepseek.CALL_END)}"


def _dsml(w: Writer, i: int, fn: dict) -> str:
    params = _tagged(w, i, fn, dsml.PARAM,
                     lambda raw: f'" string="{"true" if raw else "false"}">',
                     dsml.PARAM_END + "\n", dsml.PARAM_END)
    head = f'{dsml.INVOKE}{fn["name"]}">\n'
    return f"{w.seq(head)} {params} {w.seq(dsml.INVOKE_END + NL)}"


def _glm(w: Writer, i: int, fn: dict) -> str:
    params = _tagged(w, i, fn, "<arg_key>", lambda raw: "</arg_key>\n<arg_value>",
                     "</arg_value>\n", "</arg_value>")
    return f"{w.seq(CALL_OPEN + fn['name'] + NL)} {params} {w.seq(CALL_CLOSE)}"


def _kimi(w: Writer, i: int, fn: dict) -> str:
    # The index counts the calls of the conversation (Kimi's ids); the parser does not keep it.
    head = w.seq(f"{kimi_k2.CALL}functions.{fn['name']}:")
    return (f'{head} [0-9] [0-9]? {w.seq(kimi_k2.ARG)} {_args(w, i, fn)} '
            f"{w.seq(kimi_k2.CALL_END)}")


def _minimax(w: Writer, i: int, fn: dict) -> str:
    params = _tagged(w, i, fn, '<parameter name="', lambda raw: '">', "</parameter>\n",
                     "</parameter>")
    head = minimax_xml.INVOKE + fn["name"] + '">\n'
    return f"{w.seq(head)} {params} {w.seq(INVOKE_CLOSE)}"


def _mistral(w: Writer, i: int, fn: dict) -> str:
    return f"{w.seq(mistral.CALLS + fn['name'] + mistral.ARGS)} {_args(w, i, fn)}"


def _llama3(w: Writer, i: int, fn: dict) -> str:
    head = '{"name": ' + json.dumps(fn["name"]) + ', "parameters": '
    return f"{w.seq(head)} {_args(w, i, fn)} {w.seq('}')}"


# Gemma 4's values: strings in its `<|"|>` token, bare keys, bare numbers and words.
_GEMMA_KEY = re.compile(r"[A-Za-z0-9_.\-$]+")


def _gemma_any(w: Writer) -> str:
    """A rule for any Gemma value (a property without a usable schema)."""
    name = f"{PREFIX}-gv"
    if name not in w.rules:
        q = w.seq(gemma4.QUOTE)
        w.rules[name] = (f'{q} {w.until(gemma4.QUOTE)} {q} | {PREFIX}-gnum | "true" | "false"'
                         f' | "null" | "{{" ({PREFIX}-gkv ("," {PREFIX}-gkv)*)? "}}"'
                         f' | "[" ({name} ("," {name})*)? "]"')
        w.rules[f"{PREFIX}-gkv"] = f'[A-Za-z0-9_]+ ":" {name}'
        w.rules[f"{PREFIX}-gnum"] = '"-"? [0-9]{1,15} ("." [0-9]{1,15})?'
    return name


def _comma_list(items: list[tuple[str, bool]]) -> str:
    """Comma-separated `items` (expression, required) in order, the optional ones omissible."""
    alts = []
    for k, (first, _) in enumerate(items):
        rest = " ".join(f'("," {e})' + ("" if req else "?") for e, req in items[k + 1:])
        alts.append(f"{first} {rest}".strip())
        if items[k][1]:  # a required item cannot be skipped: no later item may come first
            break
    else:
        alts.append('""')
    return "(" + " | ".join(alts) + ")"


def _gemma_value(w: Writer, schema: dict, depth: int = 0) -> str:
    enum = schema.get("enum")
    q = w.seq(gemma4.QUOTE)
    if isinstance(enum, list) and enum and all(isinstance(e, str) for e in enum):
        return "(" + " | ".join(f"{q} {_lit(e)} {q}" for e in enum) + ")"
    kind = schema.get("type")
    if kind == "string":
        return f"{q} {w.until(gemma4.QUOTE)} {q}"
    if kind == "integer":
        return '("-"? [0-9]{1,15})'
    if kind == "number":
        _gemma_any(w)
        return f"{PREFIX}-gnum"
    if kind == "boolean":
        return '("true" | "false")'
    if kind == "null":
        return '"null"'
    if depth < 8 and kind == "array" and isinstance(schema.get("items"), dict):
        item = _gemma_value(w, schema["items"], depth + 1)
        return f'"[" ({item} ("," {item})*)? "]"'
    if depth < 8 and kind == "object" and isinstance(schema.get("properties"), dict):
        required = schema.get("required") if isinstance(schema.get("required"), list) else []
        items = []
        for k, sub in schema["properties"].items():
            key = k if _GEMMA_KEY.fullmatch(k) else json.dumps(k)
            value = _gemma_value(w, sub if isinstance(sub, dict) else {}, depth + 1)
            items.append((f"{_lit(key + ':')} {value}", k in required))
        return f'"{{" {_comma_list(items)} "}}"'
    return _gemma_any(w)


def _gemma4(w: Writer, i: int, fn: dict) -> str:
    params = _params(fn)
    args = (_gemma_value(w, params) if isinstance(params.get("properties"), dict)
            else f'"{{" ({PREFIX}-gkv ("," {PREFIX}-gkv)*)? "}}"')
    _gemma_any(w)
    return (f"{w.seq(gemma4.CALL + 'call:' + fn['name'])} {args} "
            f"{w.seq(gemma4.CALL_END)}")


@dataclass(frozen=True, slots=True)
class Format:
    """How a family writes its calls: one call, what opens and closes a list of them, what
    separates two, and whether one reply can hold several (gpt-oss stops at `<|call|>`)."""

    call: Callable[[Writer, int, dict], str]
    open: str = ""
    sep: str = ""
    close: str = ""
    several: bool = True


FORMATS: dict[str, Format] = {
    "hermes-json": Format(_hermes, sep="\n"),
    "qwen-xml": Format(_qwen, sep="\n"),
    "harmony": Format(_harmony, several=False),
    "deepseek": Format(_deepseek, open=deepseek.CALLS_BEGIN, close=deepseek.CALLS_END),
    "dsml": Format(_dsml, open=dsml.SECTION + NL, close=dsml.SECTION_END),
    "glm": Format(_glm, sep="\n"),
    "kimi-k2": Format(_kimi, open=kimi_k2.SECTION, close=kimi_k2.SECTION_END),
    "minimax-xml": Format(_minimax, open=minimax_xml.SECTION + NL,
                          close=minimax_xml.SECTION_END),
    "mistral": Format(_mistral),
    "gemma4": Format(_gemma4),
    "llama3-json": Format(_llama3, sep="; "),
}
FORMATS["auto"] = FORMATS["hermes-json"]  # auto reads Hermes' calls as well as Qwen's
