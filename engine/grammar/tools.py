"""Grammars that make the model call a tool: `tool_choice` "required" or one named function.

Owns `forced_call(family, tools, name, reasoning, tokens)`, the GBNF text the llama engine
samples under, written in the pack's own call format for every family, so that the one output
parser reads the result as it reads any call (docs/design.md, section 4 "The parser";
llama.cpp's server builds the same kind of grammar for `tool_choice`), and `request_grammar`,
the choice of grammar for a request. Pure text building on the caller's thread (the
service's); it uses llama-cpp-python's JSON-schema converter (as engine/grammar/json_schema.py
does), so `app/` need not.
writer.py writes grammar text (literals, token references, JSON by schema, key/value
parameters); each family's module writes its own call markup with it (its record's `grammar`).

What each family is made to write (engine/parse/families/ reads it back):

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
schema (engine/parse/schema.py) gives schema-valid arguments.

Special tokens: gpt-oss's `<|channel|>`, DeepSeek's `<｜tool▁sep｜>`, Mistral's `[TOOL_CALLS]`
... are single tokens of their vocabularies, which a grammar's quoted text would let the model
spell in ordinary pieces instead. `tokens` maps such a marker's text to its id: every
occurrence in the markup is then the token reference `<[ID]>` (llama.cpp's GBNF since its
token-reference support; `<[ID]>` rather than `<TEXT>` because `[TOOL_CALLS]` or `｜DSML｜`
have no angle brackets). `special_ids` builds the map from the engine's vocabulary: the
family's preserved tokens (the ones the engine renders as text) that the vocabulary has. A
vocabulary without them (SmolLM2, a replay) gets the markers as text.

"required" allows one call or several in a row (exactly one when the request allows one call
per reply: `parallel_calls` False, as llama.cpp's server writes `call` rather than `call+` for
`parallel_tool_calls: false`); a named function exactly one call of it.
With `reasoning` (the prompt ends inside the family's open reasoning), the call comes after
the reasoning: any text without the family's closer, then the closer.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping

from engine.grammar.bounds import GRAMMAR_BYTES, GrammarTooLarge, count_relaxed
from engine.grammar.writer import PREFIX, Writer, excluding
from engine.parse.families import REGISTRY, CallGrammar, get

__all__ = ["FORCED", "FORMATS", "PREFIX", "CallGrammar", "CallGuard", "Writer", "excluding",
           "forced_call", "grammar_of", "request_grammar", "request_guard", "request_thinking",
           "special_ids"]

# Each family's forced-call grammar, from its record (engine/parse/families/registry.py);
# `auto` writes Hermes' calls, which it reads as well as Qwen's.
FORMATS: dict[str, CallGrammar] = {
    name: fam.grammar for name, fam in REGISTRY.items() if fam.grammar is not None}
FORMATS["auto"] = FORMATS["hermes-json"]


def grammar_of(family: str) -> CallGrammar | None:
    """The forced-call grammar of `family`: a written family's, or one derived from a
    template at run time (registered after this table was built), None without one."""
    if family in FORMATS:
        return FORMATS[family]
    fam = get(family)
    return fam.grammar if fam is not None else None

log = logging.getLogger("prism")



def _reasoning(family: str) -> tuple[str, str] | None:
    """(closer, what follows it before a call) of the family's reasoning, None without one:
    what its writer writes after the closer (Harmony's next message, `<think>`'s blank line)."""
    fam = get("hermes-json" if family == "auto" else family)
    closer = fam.markers.think_close if fam is not None else None
    if not closer:
        return None
    return closer, fam.writer.reasoning_close.partition(closer)[2]


def forced_call(family: str, tools: tuple[dict, ...], name: str | None = None,
                reasoning: bool = False, tokens: Mapping[str, int] | None = None,
                several: bool = True) -> str:
    """GBNF for a reply that is tool calls only, in `family`'s format: to `name` (one call),
    or to any of `tools` (one or more where the family allows and `several`, else one).
    `tokens`: the special tokens (text -> id) the markup references as tokens. Raises
    ValueError when no tool matches, GrammarTooLarge (a ValueError naming the tool, or
    `tools`) when the grammar would exceed bounds.GRAMMAR_BYTES. Bounds a schema's grammar
    cannot keep (bounds.py) are relaxed and logged."""
    fmt = grammar_of(family)
    if fmt is None:
        raise KeyError(family)
    w = Writer(tokens or {})
    calls = []
    for i, tool in enumerate(tools):
        fn = tool.get("function") or {}
        if not fn.get("name") or (name is not None and fn["name"] != name):
            continue
        w.where = f"tools[{i}] ({fn['name']!r})"
        before = _size(w)
        w.rules[f"{PREFIX}{i}-call"] = fmt.call(w, i, fn)
        calls.append(f"{PREFIX}{i}-call")
        if _size(w) - before > GRAMMAR_BYTES:
            raise GrammarTooLarge(w.where, _size(w) - before)
    if not calls:
        raise ValueError(f"no tool named {name!r}" if name else "no tools to call")
    w.rules[f"{PREFIX}-any"] = " | ".join(calls)
    body = f"{PREFIX}-any"
    if name is None and fmt.several and several:
        sep = f"{w.seq(fmt.sep)} " if fmt.sep else ""
        body = f"{PREFIX}-any ({sep}{PREFIX}-any)*"
    if fmt.open or fmt.close:
        body = f"{w.seq(fmt.open)} {body} {w.seq(fmt.close)}"
    think = _reasoning(family) if reasoning else None
    if think is not None:
        closer, after = think
        body = f"{w.until(closer, f'{PREFIX}-think')} {w.seq(closer + after)} {body}"
    w.rules["root"] = body
    own = "\n".join(f"{k} ::= {v}" for k, v in w.rules.items())
    grammar = own + "\n" + w.conv.format_grammar()
    if len(grammar) > GRAMMAR_BYTES:
        raise GrammarTooLarge("tools", len(grammar))
    if w.relaxed:
        count_relaxed(len(w.relaxed))
        log.warning("[prism] call grammar: %d schema bounds are too large for a grammar and "
                    "are not enforced while sampling: %s", len(w.relaxed), brief(w.relaxed))
    return grammar


def _size(w: Writer) -> int:
    """About how long the grammar written so far is (its rules' text)."""
    return sum(len(v) for v in w.rules.values()) + sum(len(v) for v in w.conv._rules.values())


def brief(items: list[str] | tuple[str, ...], most: int = 3, chars: int = 300) -> str:
    """A few of `items` for a log line, never the whole of a long list."""
    text = "; ".join(items[:most]) + (f"; and {len(items) - most} more" if len(items) > most
                                       else "")
    return text if len(text) <= chars else text[:chars] + "..."


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


def request_grammar(request, family: str, start: str, engine=None) -> str | None:
    """The grammar a request's job samples under: a forced call's when its tool_choice
    forces one (it wins over a response format: a call is not a JSON answer), else its own.
    `engine`: whose vocabulary's special tokens the call markup references."""
    if request.tool_choice in FORCED and request.tools:
        if grammar_of(family) is not None:
            # The family's preserved tokens (engine/chat/detect.py), which the engine renders as
            # text: a marker the vocabulary has as a token is sampled as that token.
            from engine.chat.detect import preserved_tokens

            tokens = special_ids(engine, preserved_tokens(family)) if engine else {}
            return forced_call(family, request.tools, request.tool_name,
                               reasoning=start == "reasoning", tokens=tokens,
                               several=getattr(request, "parallel_calls", True))
        log.warning("[prism] tool_choice %r is not enforced: no call grammar for the %s "
                    "format, so the model is asked to call, not forced",
                    request.tool_name or request.tool_choice, family)
    return request.grammar


def request_thinking(request, default: bool) -> bool:
    """Thinking for a request: its own choice, else the pack's default, except that a forced
    call with no stated choice is answered without thinking (the call is the whole reply, as
    a json_schema format is answered without thinking)."""
    if request.thinking is not None:
        return request.thinking
    return False if request.tool_choice in FORCED and request.tools else default


class CallGuard:
    """A job's guard (the `Guard` protocol of engine/backends/base.py): the grammar of one call
    in the family's syntax, and the run's parser, which says where a real call has opened.
    Built on the service's thread; `opened` runs on the engine thread, where the parser is fed."""

    def __init__(self, grammar: str, parser) -> None:
        self.grammar = grammar
        self._parser = parser

    def opened(self) -> int | None:
        at = self._parser.call_opened_at
        return at if at is not None else self._parser.call_pending_at


def request_guard(request, family: str, parser, engine=None, default: bool = True):
    """The call guard for a request, or None: only under tool_choice "auto" with tools declared
    (a forced call has its grammar, "none" no calls), no other grammar of its own (a response
    format), a family with a call grammar, and the guard on (the request's `guard_calls`, else
    `default`: the server's --no-guard-calls)."""
    on = request.guard_calls if request.guard_calls is not None else default
    if (not on or not request.tools or request.tool_choice != "auto" or request.grammar
            or grammar_of(family) is None):
        return None
    from engine.chat.detect import preserved_tokens

    tokens = special_ids(engine, preserved_tokens(family)) if engine else {}
    try:
        grammar = forced_call(family, request.tools, tokens=tokens, several=False)
    except GrammarTooLarge as e:
        log.warning("[prism] tool calls are not guarded for this request: %s", e)
        return None
    except ValueError:  # no tool has a name
        return None
    return CallGuard(grammar, parser)
