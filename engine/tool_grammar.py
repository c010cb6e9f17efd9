"""Grammars that make the model call a tool: `tool_choice` "required" or one named function.

Owns `forced_call(dialect, tools, name, reasoning)`, the GBNF text the llama engine samples
under, written in the pack's tool-call dialect so that the one output parser reads the result
as it reads any call (docs/design.md, section "The parser"; llama.cpp's server builds the same
kind of grammar for `tool_choice`). Pure text building on the caller's thread; it uses
llama-cpp-python's JSON-schema converter for Hermes arguments, so `app/` need not import it.

- hermes-json: `<tool_call>\\n{"name": "NAME", "arguments": ARGS}\\n</tool_call>`, ARGS
  constrained by the tool's `parameters` schema (any JSON object when the converter does not
  cover the schema).
- qwen-xml: `<tool_call>\\n<function=NAME>\\n` then `<parameter=KEY>\\nVALUE\\n</parameter>\\n`
  for declared keys, then `</function>\\n</tool_call>`; a VALUE is any text without
  `</parameter>`.

"required" allows one call or several in a row; a named function exactly one call of it.
With `reasoning` (the prompt ends inside an open `<think>`), the call must come after the
reasoning, which is any text without `</think>`, closed by `</think>`.

The other families' formats (harmony, deepseek, mistral, ...; engine/families.py) have no call
grammar here yet: a request that forces a call on such a pack samples without one (the model is
asked, not forced) and a warning says so. Hermes' `<tool_call>` grammar there would force
markup that pack's parser does not read as a call.
"""

from __future__ import annotations

import json
import logging

from engine.tags import CALL_CLOSE, CALL_OPEN, THINK_CLOSE

log = logging.getLogger("prism")
PREFIX = "tc"  # every rule written here starts with it; the schema converter's rules do not
GRAMMAR_DIALECTS = frozenset({"hermes-json", "qwen-xml"})  # the formats forced_call writes


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


def _hermes_call(conv, i: int, fn: dict) -> str:
    params = fn.get("parameters") or {"type": "object"}
    try:
        schema = conv.resolve_refs(params, f"tool{i}")
        args = conv.visit(schema, f"{PREFIX}{i}-args")
    except Exception:  # a schema the converter does not cover: any object
        args = conv.visit({"type": "object"}, f"{PREFIX}{i}-args")
    head = CALL_OPEN + '\n{"name": ' + json.dumps(fn["name"]) + ', "arguments": '
    return f"{_lit(head)} {args} {_lit('}' + chr(10) + CALL_CLOSE)}"


def _xml_call(rules: dict[str, str], i: int, fn: dict) -> str:
    props = (fn.get("parameters") or {}).get("properties")
    keys = sorted(props) if isinstance(props, dict) else []
    key = " | ".join(_lit(k) for k in keys) if keys else "[A-Za-z0-9_.-]+"
    rules[f"{PREFIX}{i}-param"] = (f'"<parameter=" ({key}) ">\\n" {PREFIX}-value0 '
                                   '"\\n</parameter>\\n"')
    head = f"{CALL_OPEN}\n<function={fn['name']}>\n"
    return f"{_lit(head)} {PREFIX}{i}-param* {_lit('</function>' + chr(10) + CALL_CLOSE)}"


def forced_call(dialect: str, tools: tuple[dict, ...], name: str | None = None,
                reasoning: bool = False) -> str:
    """GBNF for a reply that is tool calls only: to `name` (one call), or to any of `tools`
    (one or more). Raises ValueError when no tool matches."""
    from llama_cpp.llama_grammar import SchemaConverter

    conv = SchemaConverter(prop_order={}, allow_fetch=False, dotall=False, raw_pattern=False)
    rules: dict[str, str] = {}
    calls = []
    for i, tool in enumerate(tools):
        fn = tool.get("function") or {}
        if not fn.get("name") or (name is not None and fn["name"] != name):
            continue
        xml = dialect == "qwen-xml"
        rules[f"{PREFIX}{i}-call"] = _xml_call(rules, i, fn) if xml else _hermes_call(conv, i, fn)
        calls.append(f"{PREFIX}{i}-call")
    if not calls:
        raise ValueError(f"no tool named {name!r}" if name else "no tools to call")
    if dialect == "qwen-xml":
        rules.update(excluding(f"{PREFIX}-value", "</parameter>"))
    rules[f"{PREFIX}-any"] = " | ".join(calls)
    body = f"{PREFIX}-any" if name is not None else f'{PREFIX}-any ("\\n" {PREFIX}-any)*'
    if reasoning:
        rules.update(excluding(f"{PREFIX}-think", THINK_CLOSE))
        body = f'{PREFIX}-think0 {_lit(THINK_CLOSE + chr(10) * 2)} {body}'
    rules["root"] = body
    own = "\n".join(f"{k} ::= {v}" for k, v in rules.items())
    return own + "\n" + conv.format_grammar()


FORCED = frozenset({"required", "function"})


def request_grammar(request, dialect: str, start: str) -> str | None:
    """The grammar a request's job samples under: a forced call's when its tool_choice
    forces one (it wins over a response format: a call is not a JSON answer), else its own."""
    if request.tool_choice in FORCED and request.tools:
        if dialect in GRAMMAR_DIALECTS:
            return forced_call(dialect, request.tools, request.tool_name,
                               reasoning=start == "reasoning")
        log.warning("[prism] tool_choice %r is not enforced: no call grammar for the %s "
                    "format yet, so the model is asked to call, not forced",
                    request.tool_name or request.tool_choice, dialect)
    return request.grammar


def request_thinking(request, default: bool) -> bool:
    """Thinking for a request: its own choice, else the pack's default, except that a forced
    call with no stated choice is answered without thinking (the call is the whole reply, as
    a json_schema format is answered without thinking)."""
    if request.thinking is not None:
        return request.thinking
    return False if request.tool_choice in FORCED and request.tools else default
