"""engine/grammar/bounds.py and json_schema.py: every schema becomes a grammar llama.cpp parses.

Each hostile schema of the table is turned into the response-format grammar and into the
forced-call and guard grammars of every family, and llama.cpp's own parser reads each one
against the default model's vocabulary. Before the bounds, a `maxLength` of 20,000 overflowed
the C stack in that parser (the process died), a few thousand made it refuse the grammar, and
a double quote in an enum value ended the GBNF literal early.
"""

from __future__ import annotations

import pytest

from engine.grammar.bounds import GRAMMAR_BYTES, REPEAT, GrammarTooLarge, pattern_gbnf
from engine.grammar.json_schema import schema_gbnf
from engine.grammar.tools import FORMATS, forced_call

FIELD = "response_format.json_schema.schema"


def obj(**props) -> dict:
    return {"type": "object", "properties": props, "required": list(props)}


HOSTILE = {
    "maxLength 20000": obj(s={"type": "string", "maxLength": 20000}),
    "maxLength 2000": obj(s={"type": "string", "maxLength": 2000}),
    "minLength 5000": obj(s={"type": "string", "minLength": 5000}),
    "maxItems 100000": obj(a={"type": "array", "items": {"type": "integer"}, "maxItems": 100000}),
    "pattern {0,100000}": obj(s={"type": "string", "pattern": "^.{0,100000}$"}),
    "many counts": obj(**{f"p{i}": {"type": "string", "maxLength": REPEAT} for i in range(40)}),
    "quotes and newlines": obj(**{'say "hi"\n\\': {"enum": ['say "hi"', "a\\b", "x\ny",
                                                               "\b\f\x01", 'end\\"']}}),
    "const with quote": obj(c={"const": 'he said "no"'}),
    "backreference": obj(s={"type": "string", "pattern": "^(a+)\\1$"}),
    "regex escapes": obj(s={"type": "string", "pattern": "^\\d{3}-\\w+\\.[\\d.\\-]*\\s?$"}),
    "lookahead": obj(s={"type": "string", "pattern": "^(?=a)a+$"}),
    "unanchored": obj(s={"type": "string", "pattern": "abc"}),
    "enum 10k": obj(e={"enum": [f"v{i}" for i in range(10_000)]}),
    "mixed enum": obj(e={"enum": ["a", 1, 2.5, True, None, 'q"uote', [1], {"k": "v"}] * 80}),
    "recursive ref": {"type": "object", "properties": {"n": {"$ref": "#/$defs/node"}},
                      "$defs": {"node": {"type": "object", "properties": {
                          "v": {"type": "integer"}, "next": {"$ref": "#/$defs/node"}}}}},
    "300 properties": {"type": "object",
                       "properties": {f"k{i}": {"type": "integer"} for i in range(300)}},
}


@pytest.fixture(scope="module")
def parses(default_model):
    """llama.cpp's own grammar parser against the default model's vocabulary."""
    import llama_cpp as C

    from engine.backends.llama.vocab import Vocab

    vocab = Vocab(default_model)

    def check(grammar: str) -> None:
        assert len(grammar) <= GRAMMAR_BYTES
        g = C.llama_sampler_init_grammar(vocab._model.vocab, grammar.encode(), b"root")
        assert g, f"llama.cpp rejects the grammar: {grammar[:400]}"
        C.llama_sampler_free(g)

    check.vocab = vocab._model.vocab  # type: ignore[attr-defined]
    yield check
    vocab.close()


@pytest.mark.model
@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_a_hostile_schema_is_a_grammar_llama_cpp_parses(parses, case):
    got = schema_gbnf(HOSTILE[case], FIELD)
    if case != "recursive ref":  # a $ref in a property: the converter covers it
        assert got.gbnf is not None
    if got.gbnf is not None:
        parses(got.gbnf)
    tool = {"type": "function", "function": {"name": "t", "parameters": HOSTILE[case]}}
    for family in sorted(FORMATS):
        parses(forced_call(family, (tool,)))  # tool_choice "required" / named
        parses(forced_call(family, (tool,), several=False))  # the guard under "auto"


def test_relaxations_name_the_field_and_the_limit():
    got = schema_gbnf(HOSTILE["maxLength 20000"], FIELD)
    assert got.relaxed == (f"{FIELD}.properties.s.maxLength: 20000 (over {REPEAT}; not "
                           "enforced while sampling)",)
    assert "20000" not in got.gbnf and got.gbnf.count("(") < 100  # a plain string, not nested
    kept = schema_gbnf(obj(s={"type": "string", "maxLength": 20}), FIELD)
    assert kept.relaxed == () and kept.gbnf.count("char") > 20  # within bounds: enforced
    enum = schema_gbnf(HOSTILE["enum 10k"], FIELD)
    assert enum.relaxed[0].startswith(f"{FIELD}.properties.e.enum: 10000 values")
    assert "v9999" not in enum.gbnf
    budget = schema_gbnf(HOSTILE["many counts"], FIELD)
    assert len(budget.relaxed) == 20  # 40 x 500 over a budget of 10,000: half go
    pattern = schema_gbnf(HOSTILE["backreference"], FIELD)
    assert pattern.relaxed == (f"{FIELD}.properties.s.pattern: the escape \\1 (backreferences, "
                               "word boundaries and the like) (any string while sampling)",)


def test_patterns_are_rewritten_into_what_the_converter_writes_as_gbnf():
    assert pattern_gbnf("^\\d{3}\\.x$") == ("^[0-9]{3}[\\x2E]x$", "", 3)
    assert pattern_gbnf("^(?:ab)+?$")[0] == "^(ab)+$"
    assert pattern_gbnf("^[\\w\\-]+$")[0] == "^[0-9A-Za-z_\\-]+$"
    assert pattern_gbnf("^a{2,501}$") == (None, "the count {2,501} (over 500)", 0)
    assert pattern_gbnf("^(a)\\1$")[0] is None
    assert pattern_gbnf("^(?<=a)b$")[0] is None
    assert pattern_gbnf("^[a$")[1].startswith("not a valid regular expression")


@pytest.mark.model
def test_a_quoted_enum_value_is_sampled_as_written(parses):
    # The grammar must accept exactly the JSON text of the value, quotes escaped.
    import llama_cpp as C
    import numpy as np

    value = 'say "hi" \\ now'
    gbnf = schema_gbnf({"enum": [value, "other"]}, FIELD).gbnf
    parses(gbnf)
    text = '"say \\"hi\\" \\\\ now"'
    vocab = parses.vocab
    g = C.llama_sampler_init_grammar(vocab, gbnf.encode(), b"root")
    raw = text.encode()
    buf = (C.llama_token * (len(raw) + 8))()
    n = C.llama_tokenize(vocab, raw, len(raw), buf, len(buf), False, True)
    one = np.zeros(1, dtype=np.dtype([("id", "<i4"), ("logit", "<f4"), ("p", "<f4")]))
    try:
        for tok in buf[:n]:
            one[0] = (tok, 0.0, 0.0)
            arr = C.llama_token_data_array(data=one.ctypes.data_as(C.llama_token_data_p),
                                           size=1, selected=-1, sorted=False)
            C.llama_sampler_apply(g, C.ctypes.byref(arr))
            assert np.isfinite(one[0]["logit"]), f"the grammar refuses {text!r} at {tok}"
            C.llama_sampler_accept(g, tok)
    finally:
        C.llama_sampler_free(g)


def test_a_call_grammar_too_large_for_any_bound_is_refused_naming_the_tools():
    big = obj(**{f"p{i}": {"type": "string", "maxLength": 50} for i in range(150)})
    tools = tuple({"type": "function", "function": {"name": f"t{i}", "parameters": big}}
                  for i in range(200))
    with pytest.raises(GrammarTooLarge) as err:
        forced_call("hermes-json", tools)
    assert err.value.path == "tools" and f"the limit is {GRAMMAR_BYTES:,}" in str(err.value)
