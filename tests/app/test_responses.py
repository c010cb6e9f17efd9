"""app/api/responses.py over HTTP with the `openai` SDK's Responses client: output items streamed
and whole (identical), the event sequence with sequence numbers, function_call_output input,
json_schema text format checked with jsonschema, incomplete at the token limit."""

from __future__ import annotations

import json

import openai
import pytest

from tests.app.conftest import TOOLS, captured, oracle, sdk_kwargs, xml_call
from tests.app.test_openai import CASES

RESP_TOOLS = [{"type": "function", "name": t["function"]["name"],
               "description": t["function"]["description"],
               "parameters": t["function"]["parameters"]} for t in TOOLS]


def items(output) -> list[tuple]:
    out = []
    for item in output:
        if item.type == "reasoning":
            out.append(("reasoning", "".join(c.text for c in item.content or ())))
        elif item.type == "message":
            out.append(("message", "".join(c.text for c in item.content)))
        else:
            out.append(("function_call", item.name, json.loads(item.arguments), item.call_id))
    return out


def summary(its: list[tuple]) -> tuple:
    return ("".join(i[1] for i in its if i[0] == "reasoning"),
            "".join(i[1] for i in its if i[0] == "message"),
            [(i[1], i[2]) for i in its if i[0] == "function_call"])


def stream_final(client, **kw):
    events = list(client.responses.create(stream=True, **kw))
    seqs = [e.sequence_number for e in events]
    assert seqs == list(range(len(events)))
    return events


@pytest.mark.parametrize("name", ["recorded_failure_0", "several_calls", "stray_think_end",
                                  "control_fence", "plain_answer"])
def test_streamed_and_whole_agree_with_the_parser(serve, name):
    text = CASES[name]
    live = serve(text)
    client = live.openai()
    events = stream_final(client, model="m", input="Weather in Paris?", tools=RESP_TOOLS)
    assert events[0].type == "response.created" and events[1].type == "response.in_progress"
    assert events[-1].type == "response.completed"
    streamed = events[-1].response
    whole = client.responses.create(model="m", input="Weather in Paris?", tools=RESP_TOOLS)
    assert [i[:3] for i in items(streamed.output)] == [i[:3] for i in items(whole.output)]
    res = oracle(text, tools=TOOLS)
    assert summary(items(whole.output)) == (
        res.reasoning, res.content, [(c.name, c.arguments) for c in res.tool_calls])
    assert whole.status == "completed" and whole.usage.output_tokens == len(live.last.tokens)
    # The deltas add up to the final items.
    text_deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text_deltas == res.content
    arg_deltas = "".join(e.delta for e in events
                         if e.type == "response.function_call_arguments.delta")
    assert arg_deltas == "".join(c.arguments_json for c in res.tool_calls)
    added = [e.output_index for e in events if e.type == "response.output_item.added"]
    done = [e.output_index for e in events if e.type == "response.output_item.done"]
    assert added == done == list(range(len(whole.output)))


def test_function_call_output_round_trip(serve):
    live = serve("Need data.\n\n" + xml_call("get_weather", city="Oslo"),
                 "Ok.\n</think>\n\nCold in Oslo.")
    client = live.openai()
    first = client.responses.create(model="m", input="Weather in Oslo?", tools=RESP_TOOLS,
                                    instructions="Be brief.")
    call = next(i for i in first.output if i.type == "function_call")
    assert call.name == "get_weather" and json.loads(call.arguments) == {"city": "Oslo"}
    history = [{"role": "user", "content": "Weather in Oslo?"},
               *[i.model_dump(exclude_none=True) for i in first.output],
               {"type": "function_call_output", "call_id": call.call_id, "output": "-3 C"}]
    second = client.responses.create(model="m", input=history, tools=RESP_TOOLS,
                                     instructions="Be brief.")
    assert second.output_text == "Cold in Oslo."
    got = live.last.request.messages
    assert [m.role for m in got] == ["system", "user", "assistant", "tool"]
    assert got[2].reasoning_content == "Need data."
    assert got[2].tool_calls[0]["function"]["arguments"] == {"city": "Oslo"}
    assert got[3].tool_call_id == call.call_id and got[3].content == "-3 C"
    assert "<tool_response>\n-3 C\n</tool_response>" in live.last.prompt


SCHEMA = {"type": "object", "properties": {"city": {"type": "string"},
                                           "temp": {"type": "number"}},
          "required": ["city", "temp"], "additionalProperties": False}
FORMAT = {"format": {"type": "json_schema", "name": "weather", "schema": SCHEMA,
                     "strict": True}}


def test_json_schema_output_is_validated(serve):
    live = serve('{"city": "Paris", "temp": 21.5}', '{"city": "Paris"}')
    client = live.openai()
    good = client.responses.create(model="m", input="json please", text=FORMAT)
    assert good.status == "completed" and json.loads(good.output_text)["temp"] == 21.5
    assert live.last.request.thinking is False  # structured output turns thinking off
    bad = stream_final(client, model="m", input="json please", text=FORMAT)
    assert bad[-1].type == "response.failed"
    assert bad[-1].response.error.code == "invalid_output"
    assert "'temp' is a required property" in bad[-1].response.error.message
    whole_bad = client.responses.create(model="m", input="json please", text=FORMAT)
    assert whole_bad.status == "failed" and whole_bad.output_text == '{"city": "Paris"}'


def test_invalid_schema_is_a_400_naming_the_field(serve):
    live = serve("x")
    fmt = {"format": {"type": "json_schema", "name": "w", "schema": {"type": "nonsense"}}}
    with pytest.raises(openai.BadRequestError) as err:
        live.openai().responses.create(model="m", input="hi", text=fmt)
    assert err.value.param == "text.format.schema"
    assert "not a valid JSON schema" in err.value.message


def test_max_output_tokens_gives_incomplete(serve):
    live = serve("Thought.\n</think>\n\nThis answer goes on and on and on.")
    client = live.openai()
    whole = client.responses.create(model="m", input="hi", max_output_tokens=4)
    assert whole.status == "incomplete"
    assert whole.incomplete_details.reason == "max_output_tokens"
    events = stream_final(client, model="m", input="hi", max_output_tokens=4)
    assert events[-1].type == "response.incomplete"


def test_previous_response_id_is_refused_clearly(serve):
    live = serve("x")
    with pytest.raises(openai.BadRequestError) as err:
        live.openai().responses.create(model="m", input="hi", previous_response_id="resp_1")
    assert err.value.param == "previous_response_id"
    assert "send the whole conversation" in err.value.message


def test_reasoning_effort_none_turns_thinking_off(serve):
    live = serve("Plain.")
    resp = live.openai().responses.create(model="m", input="hi", reasoning={"effort": "none"})
    assert items(resp.output) == [("message", "Plain.")]
    assert live.last.start_state == "content"


def test_chat_shaped_tools_are_accepted(serve):
    live = serve("Hm.\n\n" + xml_call("search", query="tides"))
    resp = live.openai().responses.create(model="m", input="tides?", tools=TOOLS)
    call = next(i for i in resp.output if i.type == "function_call")
    assert call.name == "search" and json.loads(call.arguments) == {"query": "tides"}
    assert [t["function"]["name"] for t in live.last.request.tools] == ["get_weather", "search"]


def test_a_trailing_assistant_message_is_continued(serve):
    live = serve(" of the north.", pack="smollm2")
    resp = live.openai().responses.create(model="m", input=[
        {"role": "user", "content": "Tell me a story."},
        {"role": "assistant", "content": [{"type": "output_text", "text": "The queen"}]}])
    assert items(resp.output) == [("message", " of the north.")]
    assert live.last.prompt.endswith("<|im_start|>assistant\nThe queen")


def test_codex_first_request_through_the_sdk(serve):
    # Codex's real first request: developer messages, namespace and web_search tools (no
    # local implementation: skipped), reasoning settings, include, client_metadata.
    cap = captured("codex")
    live = serve("Plan.\n</think>\n\n" + xml_call("exec_command", cmd="touch proof.txt"))
    create = live.openai().responses.create
    events = list(create(**sdk_kwargs(create, cap["body"])))
    done = events[-1].response
    assert done.status == "completed"
    (call,) = [i for i in done.output if i.type == "function_call"]
    assert call.name == "exec_command" and json.loads(call.arguments)["cmd"] == "touch proof.txt"
    names = [t["function"]["name"] for t in live.last.request.tools]
    assert "exec_command" in names and "multi_agent_v1" not in names
    assert live.last.prompt.index("You are a coding agent") < live.last.prompt.index(
        "Create proof.txt")
