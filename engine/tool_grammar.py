"""Grammars that make the model call a tool: `tool_choice` "required" or one named function.

Owns `forced_call(dialect, tools, name, reasoning, tokens)`, the GBNF text the llama engine
samples under, written in the pack's own call format for every family, so that the one output
parser reads the result as it reads any call (docs/design.md, section "The parser"; llama.cpp's
server builds the same kind of grammar for `tool_choice`), and `request_grammar`, the choice
of grammar for a request. Pure text building on the caller's thread (the service's); it uses
llama-cpp-python's JSON-schema converter (as engine/grammar.py does), so `app/` need not.

What each family is made to write (engine/dialects/ reads it back):

- hermes-json (and `auto`): `<tool_call>\\n{"name": "NAME", "arguments": ARGS}\\n</tool_call>`.
- qwen-xml: `<tool_call>\\n<function=NAME>\\n` `<parameter=K>\\nV\\n</parameter>\\n`...
  `</function>\\n</tool_call>`.
- harmony: `<|channel|>commentary to=functions.NAME <|constrain|>json<|message|>ARGS<|call|>`
  (one call: `<|call|>` ends gpt-oss's turn).
- deepseek: V3.1's `<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>NAME<｜tool▁sep｜>ARGS
  <｜tool▁call▁end｜>`... `<｜tool▁calls▁end｜>` (the parser reads R1/V3's fenced layout too;
  the grammar writes the newer one).
- dsml: `<｜DSML｜function_calls>` / `<｜DSML｜invoke name="NAME">` /
  `<｜DSML｜parameter name="K" string="true|false">V</｜DSML｜parameter>`.
- glm: `<tool_call>NAME\\n<arg_key>K</arg_key>\\n<arg_value>V</arg_value>\\n</tool_call>`.
- kimi-k2: `<|tool_calls_section_begin|><|tool_call_begin|>functions.NAME:N
  <|tool_call_argument_begin|>ARGS<|tool_call_end|>`... `<|tool_calls_section_end|>`.
- minimax-xml: `<minimax:tool_call>\\n<invoke name="NAME">\\n<parameter name="K">V</parameter>
  \\n</invoke>\\n</minimax:tool_call>`.
- mistral: `[TOOL_CALLS]NAME[ARGS]ARGS` per call.
- gemma4: `<|tool_call>call:NAME{k:<|"|>v<|"|>,n:3}<tool_call|>` (Gemma's own values).
- llama3-json: `{"name": "NAME", "parameters": ARGS}`, several joined by `; `.

ARGS is JSON constrained by the tool's `parameters` schema (any object when the converter does
not cover it). The key/value families write the declared properties in order, the required
ones always: a `string` property as raw text (without the value's closing tag), any other as
JSON for its schema (DSML marks which with `string="true|false"`), so the parser's typing by
schema (engine/schema.py) gives schema-valid arguments.

Special tokens: gpt-oss's `<|channel|>`, DeepSeek's `<｜tool▁sep｜>`, Mistral's `[TOOL_CALLS]`
... are single tokens of their vocabularies, which a grammar's quoted text would let the model
spell in ordinary pieces instead. `tokens` maps such a marker's text to its id: every
occurrence in the markup is then the token reference `<[ID]>` (llama.cpp's GBNF since its
token-reference support; `<[ID]>` rather than `<TEXT>` because `[TOOL_CALLS]` or `｜DSML｜`
have no angle brackets). `special_ids` builds the map from the engine's vocabulary: the
family's preserved tokens (the ones the engine renders as text) that the vocabulary has. A
vocabulary without them (SmolLM2, a replay) gets the markers as text.

"required" allows one call or several in a row; a named function exactly one call of it.
With `reasoning` (the prompt ends inside the family's open reasoning), the call comes after
the reasoning: any text without the family's closer, then the closer.
"""

from __future__ import annotations

import copy
import json
import logging
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from engine.dialects import deepseek, dsml, gemma4, harmony, kimi_k2, minimax_xml, mistral
from engine.tags import CALL_CLOSE, CALL_OPEN, THINK_CLOSE

log = logging.getLogger("prism")
NL = "\n"
INVOKE_CLOSE = "</invoke>\n"  # MiniMax's
PREFIX = "tc"  # every rule written here starts with it; the schema converter's rules do not


def _lit(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


def _cls(chars: set[str]) -> str:
    return "".join("\\" + c if c in "]\\^-" else c for c in sorted(chars))


def excluding(name: str, literal: str) -> dict[str, str]:
    """Rules `name0`... matching any text that does not contain `literal` (a KMP automaton:
    rule `nameK` means the text so far ends with the first K characters of `literal`)."""
    n = len(literal)

    def step(k: int, c: str) -> int:
        s = literal[:k] + c
        for j in range(min(len(s), n), 0, -1):
            if s.endswith(literal[:j]):
                return j
        return 0

    rules: dict[str, str] = {}
    alphabet = set(literal)
    for k in range(n):
        alts = ['""']
        for c in sorted(alphabet):
            to = step(k, c)
            if to < n:
                alts.append(f"{_lit(c)} {name}{to}")
        # every other character, and the literal's own characters that lead back to 0 are
        # already listed above, so the class is "none of the literal's characters"
        alts.append(f"[^{_cls(alphabet)}] {name}0")
        rules[f"{name}{k}"] = " | ".join(alts)
    return rules


class Writer:
    """One grammar being written: its rules, the schema converter's, and the markup's special
    tokens (text -> id) written as token references."""

    def __init__(self, tokens: Mapping[str, int]) -> None:
        from llama_cpp.llama_grammar import SchemaConverter

        self.conv = SchemaConverter(prop_order={}, allow_fetch=False, dotall=False,
                                    raw_pattern=False)
        self.rules: dict[str, str] = {}
        self.tokens = dict(tokens)
        alts = sorted(self.tokens, key=len, reverse=True)  # the longer token wins, as llama.cpp
        self._split = re.compile("|".join(map(re.escape, alts))) if alts else None
        self._untils: dict[str, str] = {}

    def seq(self, text: str) -> str:
        """GBNF for exactly `text`, each special token in it a token reference."""
        parts, i = [], 0
        for m in self._split.finditer(text) if self._split else ():
            if m.start() > i:
                parts.append(_lit(text[i:m.start()]))
            parts.append(f"<[{self.tokens[m.group()]}]>")
            i = m.end()
        if i < len(text):
            parts.append(_lit(text[i:]))
        return " ".join(parts) or '""'

    def until(self, closer: str, name: str = "") -> str:
        """A rule for any text that does not contain `closer` (the closer not included), its
        rules named `name`0... (else numbered)."""
        if closer not in self._untils:
            name = name or f"{PREFIX}-u{len(self._untils)}-"
            self.rules.update(excluding(name, closer))
            self._untils[closer] = f"{name}0"
        return self._untils[closer]

    def json(self, schema: dict, name: str, fallback: dict) -> str:
        """The converter's rule for JSON matching `schema` (`fallback`'s where it cannot),
        without the whitespace the converter allows after a value: where the arguments end
        the call (Mistral's), it would be answer text after the call."""
        try:
            rule = self.conv.visit(self.conv.resolve_refs(copy.deepcopy(schema), name), name)
        except Exception:  # the converter raises assorted errors on schemas it does not cover
            rule = self.conv.visit(fallback, name + "-any")
        body = self.conv._rules.get(rule, "")  # the converter keeps its rules there
        if body.endswith(" space"):
            self.conv._rules[rule] = body[: -len(" space")]
        return rule


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
GRAMMAR_DIALECTS = frozenset(FORMATS)  # the formats forced_call writes


def _reasoning(dialect: str) -> tuple[str, str] | None:
    """(closer, what follows it before a call) of the family's reasoning, None without one."""
    from engine.dialects import markers

    mk = markers(dialect)
    if not mk.think_close:
        return None
    if dialect == harmony.NAME:  # the analysis message ends; the call is the next message
        return mk.think_close, "<|start|>assistant"
    return mk.think_close, "\n\n" if mk.think_close == THINK_CLOSE else ""


def forced_call(dialect: str, tools: tuple[dict, ...], name: str | None = None,
                reasoning: bool = False, tokens: Mapping[str, int] | None = None) -> str:
    """GBNF for a reply that is tool calls only, in `dialect`'s format: to `name` (one call),
    or to any of `tools` (one or more where the family allows). `tokens`: the special tokens
    (text -> id) the markup references as tokens. Raises ValueError when no tool matches."""
    fmt = FORMATS[dialect]
    w = Writer(tokens or {})
    calls = []
    for i, tool in enumerate(tools):
        fn = tool.get("function") or {}
        if not fn.get("name") or (name is not None and fn["name"] != name):
            continue
        w.rules[f"{PREFIX}{i}-call"] = fmt.call(w, i, fn)
        calls.append(f"{PREFIX}{i}-call")
    if not calls:
        raise ValueError(f"no tool named {name!r}" if name else "no tools to call")
    w.rules[f"{PREFIX}-any"] = " | ".join(calls)
    body = f"{PREFIX}-any"
    if name is None and fmt.several:
        sep = f"{w.seq(fmt.sep)} " if fmt.sep else ""
        body = f"{PREFIX}-any ({sep}{PREFIX}-any)*"
    if fmt.open or fmt.close:
        body = f"{w.seq(fmt.open)} {body} {w.seq(fmt.close)}"
    think = _reasoning(dialect) if reasoning else None
    if think is not None:
        closer, after = think
        body = f"{w.until(closer, f'{PREFIX}-think')} {w.seq(closer + after)} {body}"
    w.rules["root"] = body
    own = "\n".join(f"{k} ::= {v}" for k, v in w.rules.items())
    return own + "\n" + w.conv.format_grammar()


def special_ids(engine, texts: Iterable[str]) -> dict[str, int]:
    """Those of `texts` that are special tokens of `engine`'s vocabulary, with their ids; {}
    for an engine without a vocabulary (replay, upstream). A special token's text tokenizes to
    that one token (after a BOS the model may add)."""
    specials = set(getattr(engine, "special_texts", ()) or ())
    out = {}
    for text in texts:
        if text in specials:
            ids = engine.tokenize(text)
            if ids:
                out[text] = int(ids[-1])
    return out


FORCED = frozenset({"required", "function"})


def request_grammar(request, dialect: str, start: str, engine=None) -> str | None:
    """The grammar a request's job samples under: a forced call's when its tool_choice
    forces one (it wins over a response format: a call is not a JSON answer), else its own.
    `engine`: whose vocabulary's special tokens the call markup references."""
    if request.tool_choice in FORCED and request.tools:
        if dialect in FORMATS:
            # The family's preserved tokens (engine/families.py), which the engine renders as
            # text: a marker the vocabulary has as a token is sampled as that token.
            from engine.families import preserved_tokens

            tokens = special_ids(engine, preserved_tokens(dialect)) if engine else {}
            return forced_call(dialect, request.tools, request.tool_name,
                               reasoning=start == "reasoning", tokens=tokens)
        log.warning("[prism] tool_choice %r is not enforced: no call grammar for the %s "
                    "format, so the model is asked to call, not forced",
                    request.tool_name or request.tool_choice, dialect)
    return request.grammar


def request_thinking(request, default: bool) -> bool:
    """Thinking for a request: its own choice, else the pack's default, except that a forced
    call with no stated choice is answered without thinking (the call is the whole reply, as
    a json_schema format is answered without thinking)."""
    if request.thinking is not None:
        return request.thinking
    return False if request.tool_choice in FORCED and request.tools else default
