"""A mid-conversation system message (Claude Code's `mid-conversation-system` beta, issue 9
item 1) through the Anthropic route to a family pack: Claude Code's captured first request
(tests/app/data/client_claude_code.json: a user message, then a system message) sent by the
official `anthropic` SDK to a replay server on the family's built-in pack (what `prism serve
--pack FAMILY --replay FILE` runs). The prompt must carry the system message where it stands,
in the family's form (resources/templates/*.jinja, tests/engine/chat/test_family_templates.py),
and the reply is read as the family's parser reads it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.parse import families

CAPTURE = json.loads((Path(__file__).parent / "data" / "client_claude_code.json")
                     .read_text("utf-8"))
# family pack: (what the model writes after the prompt, how the pack writes a system note)
FAMILIES = {
    "deepseek": ("The user wants French.\n</think>\n\nBonjour.",
                 "<｜User｜><system>\n{}\n</system><｜Assistant｜><think>"),
    "harmony": ("<|channel|>analysis<|message|>The user wants French.<|end|>"
                "<|start|>assistant<|channel|>final<|message|>Bonjour.<|return|>",
                "<|start|>developer<|message|># Instructions\n\n{}\n\n<|end|><|start|>assistant"),
}


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_claude_codes_mid_conversation_system_message_reaches_a_family_pack(serve, family):
    assert family in families.NAMES, f"no parser registered for the {family} family"
    output, form = FAMILIES[family]
    body, headers = CAPTURE["body"], CAPTURE["headers"]
    assert [m["role"] for m in body["messages"]] == ["user", "system"]  # the captured shape
    note = body["messages"][1]["content"]
    live = serve(output, output, pack=family)
    client = live.anthropic()
    kw = {k: body[k] for k in ("model", "messages", "system", "tools", "max_tokens", "thinking",
                               "metadata")}
    extra = {k: body[k] for k in ("context_management", "output_config")}
    with client.messages.stream(**kw, extra_body=extra,
                                extra_headers={"anthropic-beta": headers["anthropic-beta"]}
                                ) as stream:
        for _ in stream:
            pass
        message = stream.get_final_message()
    prompt = live.last.prompt
    # the system message is rendered once, after the user's text, and hands over to the model
    assert prompt.count(note) == 1
    user_text = body["messages"][0]["content"][-1]["text"]
    assert prompt.rindex(user_text[-200:]) < prompt.index(note)
    assert prompt.endswith(form.format(note)), prompt[-300:]
    thinking = "".join(b.thinking for b in message.content if b.type == "thinking")
    text = "".join(b.text for b in message.content if b.type == "text")
    assert (thinking.strip(), text.strip()) == ("The user wants French.", "Bonjour.")
    assert message.stop_reason == "end_turn"
