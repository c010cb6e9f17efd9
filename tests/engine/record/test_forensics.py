"""engine/record/forensics.py: a char of a rendered prompt mapped to its message, the engine's
offset moved onto the rendered text, when a miss is reported, and the prefix's recorded form."""

from __future__ import annotations

import os

import pytest

from engine.backends.base import PrefixMatch, Timings
from engine.chat.packs import resolve_pack
from engine.chat.request import ChatRequest, Message
from engine.record.forensics import (
    LONG_PROMPT_TOKENS,
    PromptPlace,
    locate,
    message_spans,
    messages_of,
    miss_line,
    needs_report,
    prefix_from_dict,
    prefix_to_dict,
    prompt_offset,
    shown,
)
from engine.record.recording import request_to_dict


@pytest.fixture(scope="module")
def render():
    tpl = resolve_pack("smollm2", require_model=False).chat_template()
    return lambda msgs: tpl.render(msgs, add_generation_prompt=True)


def first_difference(a: str, b: str) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y),
                min(len(a), len(b)))


def conversation(stamp: str, reminders: tuple[str, str]) -> tuple[Message, ...]:
    return (Message("system", f"You are a coding agent. Time: {stamp}. Be terse."),
            Message("user", "List the files."),
            Message("assistant", "README.md setup.py"),
            Message("user", f"<reminder>{reminders[0]}</reminder><reminder>{reminders[1]}"
                            "</reminder> Now open README.md."))


@pytest.mark.parametrize("with_render", [True, False])
def test_a_changed_timestamp_is_found_in_the_system_message(render, with_render):
    cached = render(conversation("10:31", ("todo", "lint")))
    prompt = render(conversation("10:32", ("todo", "lint")))
    char = first_difference(cached, prompt)
    place = locate(prompt, conversation("10:32", ("todo", "lint")), char,
                   render if with_render else None)
    system = conversation("10:32", ("todo", "lint"))[0].content
    assert place == PromptPlace(0, system.index("10:32") + 4, "content", "system")
    assert place.describe() == f"message 0 (system), char {place.char}"


@pytest.mark.parametrize("with_render", [True, False])
def test_reordered_reminders_are_found_in_the_last_user_message(render, with_render):
    msgs = conversation("10:31", ("lint", "todo"))
    cached = render(conversation("10:31", ("todo", "lint")))
    prompt = render(msgs)
    char = first_difference(cached, prompt)
    place = locate(prompt, msgs, char, render if with_render else None)
    assert (place.message, place.field, place.role) == (3, "content", "user")
    assert msgs[3].content[place.char:].startswith("lint")


def test_chars_in_template_text_and_after_the_last_message(render):
    msgs = conversation("10:31", ("a", "b"))
    prompt = render(msgs)
    spans = message_spans(prompt, msgs, render)
    header = spans[1][0][1] - 1  # the newline after "<|im_start|>user"
    assert locate(prompt, msgs, header) == PromptPlace(1, 0, "", "user")
    assert locate(prompt, msgs, len(prompt) - 1) == PromptPlace(4)
    assert "before message 1 (user)" in PromptPlace(1, 0, "", "user").describe()
    assert "after the last message" in PromptPlace(4).describe()


def test_marker_and_search_spans_agree_where_texts_are_verbatim(render):
    msgs = conversation("10:31", ("a", "b"))
    prompt = render(msgs)
    exact = message_spans(prompt, msgs, render)
    assert exact == message_spans(prompt, msgs)
    for m, own in zip(msgs, exact, strict=True):
        (field, a, b), = own
        assert field == "content" and prompt[a:b] == m.content


def test_a_template_that_rewrites_a_text_falls_back_to_search():
    msgs = (Message("system", "  padded  "), Message("user", "hello"))
    prompt = "<s>padded</s><u>hello</u>"  # a template that strips, which markers cannot see
    spans = message_spans(prompt, msgs, lambda ms: "".join(m.content for m in ms) + "?")
    assert spans == ((("content", 3, 9),), (("content", 16, 21),))
    assert locate(prompt, msgs, 18) == PromptPlace(1, 2, "content", "user")


def test_recorded_request_dicts_give_the_same_messages():
    req = ChatRequest(messages=conversation("10:31", ("a", "b")))
    assert messages_of(request_to_dict(req)) == req.messages
    assert messages_of(req) == req.messages and messages_of(None) == ()


def test_the_engine_offset_is_moved_past_a_bos_the_rendered_prompt_lacks():
    prompt = "<|im_start|>system\nTime: 10:32<|im_end|>"
    at = prompt.index("10:32")
    detok_at = at + len("<|endoftext|>")  # the engine's text starts with a BOS
    assert prompt_offset(prompt, PrefixMatch(9, "slot", detok_at, "10:31", "10:32<|im_end|>")) \
        == at
    # Where the text is there already, or too short to look for, the offset stays.
    assert prompt_offset(prompt, PrefixMatch(9, "slot", at, "1", "10:32")) == at
    assert prompt_offset(prompt, PrefixMatch(9, "slot", 10_000, "", "")) == len(prompt)


@pytest.mark.parametrize(("prompt", "cached", "held", "reported"), [
    (LONG_PROMPT_TOKENS, 0, 600, True),
    (LONG_PROMPT_TOKENS - 1, 0, 600, False),  # not a long prompt
    (4000, 2000, 3000, False),  # exactly half recomputed
    (4000, 1999, 3000, True),
    (4000, 100, 100, False),  # nothing longer was cached: a plain cold prompt
])
def test_which_misses_are_reported(prompt, cached, held, reported):
    t = Timings(prompt_tokens=prompt, cached_tokens=cached)
    assert needs_report(t, PrefixMatch(held, "slot", 10, "a", "b")) is reported
    assert not needs_report(t, None)


def test_the_miss_line_names_the_place_and_both_texts_trimmed():
    t = Timings(prompt_tokens=7379, cached_tokens=12, disk_tokens=0)
    p = PrefixMatch(7012, "disk", 57, "10:31. Be terse." + "x" * 100, "10:32.\nBe terse.")
    line = miss_line("req-1", t, p, PromptPlace(0, 40, "content", "system"))
    assert "7367 of 7379 prompt tokens recomputed although disk held 7012" in line
    assert "message 0 (system), char 40" in line
    assert f"cache had {shown(p.cached_text)}" in line and line.count("…") == 1
    assert 'prompt has "10:32.\\nBe terse."' in line


def test_the_prefix_round_trips_and_anything_else_is_none():
    p = PrefixMatch(7012, "slot", 57, "a\nb", "c" + os.sep)
    assert prefix_from_dict(prefix_to_dict(p)) == p
    assert prefix_from_dict(None) is None and prefix_from_dict([1]) is None
