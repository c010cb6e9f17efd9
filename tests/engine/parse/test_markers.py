"""engine/parse/markers.py: the Qwen3/Hermes tags and `Markers.starts()`, the characters the
parser's text scanner stops at (every other character is skipped in runs, so a missing one would
hide a tag, and an extra one only costs speed)."""

from __future__ import annotations

from engine.parse.markers import (
    CALL_CLOSE,
    CALL_OPEN,
    THINK_CLOSE,
    THINK_MARKERS,
    THINK_OPEN,
    Markers,
)


def test_the_qwen3_tags():
    assert (THINK_OPEN, THINK_CLOSE, CALL_OPEN, CALL_CLOSE) == (
        "<think>", "</think>", "<tool_call>", "</tool_call>")
    # What `auto`, Qwen XML and Hermes JSON read: the scanner stops only at '<'.
    assert THINK_MARKERS.starts() == "<"


def test_starts_lists_each_first_character_once_in_order():
    m = Markers("[THINK]", "[/THINK]", ("[TOOL_CALLS]", "<call>"), markup=("{frame}", "[x]"))
    assert m.starts() == "[<{"


def test_the_reasoning_opener_counts_only_where_it_may_come_back():
    once = Markers("<|think|>", "</x>", ("<c>",))
    again = Markers("~think", "</x>", ("<c>",), reopen=True)
    assert once.starts() == "<"  # the opener is read at the start of output only (rule 1)
    assert again.starts() == "<~"  # Harmony's analysis channel after a preamble


def test_a_family_without_reasoning_has_no_closer_to_stop_at():
    assert Markers(None, None, ("{", "<|python_tag|>")).starts() == "{<"

