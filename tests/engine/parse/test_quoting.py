"""engine/parse/quoting.py: where a tag stands in the Markdown around it (fences, inline code, the
start of a line), driven character by character as `OutputParser._scan_text` drives it.

Each case marks the tags it asks about with `<` and names, in order, whether each is quoted
text (inside a fence; inside backticks in the answer) and whether it stands at a line start."""

from __future__ import annotations

import pytest

from engine.parse.quoting import Quoting


def scan(text: str, in_content: bool = True, q: Quoting | None = None) -> list[tuple[bool, bool]]:
    """(quoted, at line start) at every `<`, as the parser sees them (a `<` that is no tag is
    text: the line start is over)."""
    q = q or Quoting()
    seen = []
    for c in text:
        if c == "\n":
            q.newline()
        elif c == "<":
            q.before_tag()
            seen.append((q.quoted(in_content), q.line_start))
            q.line_start = False
        elif c == "`":
            q.backtick(in_content)
        elif not q.char(c) and q.frun >= 3:
            q.text(c)
    return seen


def quoted(text: str, in_content: bool = True) -> list[bool]:
    return [at[0] for at in scan(text, in_content)]


@pytest.mark.parametrize("text, expected", [
    ("```\n<\n```\n<", [True, False]),
    ("~~~python\n<\n~~~\n<", [True, False]),  # tildes, and an info string on the opener
    ("```python\n<\n```\n<", [True, False]),
    ("   ```\n<", [True]),  # up to three spaces before the fence
    ("    ```\n<", [False]),  # four: an indented line, not a fence
    ("x ```\n<", [False]),  # a fence starts its line
    ("``\n<", [False]),  # two backticks are no fence
])
def test_a_fence_opens_at_a_line_of_three_or_more(text, expected):
    assert quoted(text) == expected


@pytest.mark.parametrize("text, expected", [
    ("````\n<\n```\n<\n````\n<", [True, True, False]),  # a shorter run does not close it
    ("```\n<\n`````\n<", [True, False]),  # a longer one does
    ("```\n<\n~~~\n<\n```\n<", [True, True, False]),  # the other character does not
    ("```\n<\n``` x\n<\n```  \n<", [True, True, False]),  # nor a run with text after it
    ("~~~\n<\n  ~~~\n<", [True, False]),  # an indented closer does (up to three spaces)
])
def test_a_fence_closes_at_the_same_character_at_least_as_long_and_alone(text, expected):
    assert quoted(text) == expected


def test_a_fence_quotes_in_the_reasoning_too():
    assert quoted("```\n<\n```\n<", in_content=False) == [True, False]


@pytest.mark.parametrize("text, expected", [
    ("`<` <", [True, False]),
    ("``a ` <`` <", [True, False]),  # one backtick does not close a run of two
    ("`a`` <` <", [True, False]),  # nor a run of two a run of one
    ("`open\n<", [False]),  # a code span ends at a newline
    ("a `b` c `<", [True]),
])
def test_inline_code_quotes_in_the_answer(text, expected):
    assert quoted(text) == expected


def test_inline_code_does_not_quote_in_the_reasoning():
    assert quoted("`<` <", in_content=False) == [False, False]


def test_line_start():
    at_start = [at[1] for at in scan("<\nx<\n<<\n  <")]
    assert at_start == [True, False, True, False, False]


def test_reset_begins_a_channel_outside_any_quote():
    q = Quoting()
    scan("```\nx `y", q=q)
    assert q.quoted(True)  # inside the fence
    q.reset(line_start=False)
    assert scan("<", q=q) == [(False, False)]
    q.reset(line_start=True)
    assert scan("<", q=q) == [(False, True)]


def test_settled_once_the_line_can_no_longer_open_a_fence():
    q = Quoting()
    assert not q.settled()  # a line start: a fence may begin
    scan("``", q=q)
    assert not q.settled()  # a backtick run is pending
    scan("`x", q=q)
    assert not q.settled()  # on a fence line: its info string matters
    q = Quoting()
    scan("plain", q=q)
    assert q.settled()
    scan("\n", q=q)
    assert not q.settled()
