"""Request conversion shared by the APIs: lenient body reading and the pieces of ChatRequest.

Owns `Lenient` (the pydantic base every body model uses: unknown fields ignored), `read_body`
(bytes -> validated model, or a 400 that names the field), and the small converters each
API needs: `text_of` (a string or a list of parts), `decode_arguments` (OpenAI's JSON-string
arguments to the dict templates iterate), `function_tool` (its parameters checked),
`sampling`, `stop_tuple`, `thinking_from_effort` and `json_schema_format` (a `json_schema`
output format: the schema is checked, and for a model that is not thinking, generation is
constrained by a grammar).

"Lenient in": any model name, `tools: []`, content as a string or parts, unknown fields and
roles' extra fields ignored. Image, audio and file parts are refused with a 400 (no model here
reads them; dropped silently, the model would describe an image it never saw).
Runs on the asyncio loop's thread.
"""

from __future__ import annotations

import json
from typing import Any, TypeVar

from fastapi import Request
from pydantic import BaseModel, ConfigDict, ValidationError

from app.api.errors import APIError, validation_message
from app.api.validate import (
    NON_TEXT_PARTS,
    check_tool_schema,
    not_text,
    parse_json,
    schema_grammar,
)
from engine.chat.budget import effort_budget
from engine.chat.request import Message, Sampling

M = TypeVar("M", bound=BaseModel)

_DEFAULT = Sampling()


class Lenient(BaseModel):
    model_config = ConfigDict(extra="ignore")


async def read_body(request: Request, model: type[M]) -> M:
    # parse_json: 400 for NaN, lone surrogates, deep nesting (issue 10, item 5)
    return validate(model, parse_json(await request.body()))


def validate(model: type[M], data: Any, prefix: str = "") -> M:
    """model.model_validate(data), with a 400 naming the field (under `prefix`) on failure."""
    try:
        return model.model_validate(data)
    except ValidationError as e:
        message, param = validation_message(e.errors(include_url=False), prefix)
        raise APIError("invalid_request", message, param=param) from e


def text_of(content: Any, field: str = "content") -> str:
    """A message's text: a string, None, or a list of parts whose text parts are joined."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for i, part in enumerate(content):
            if isinstance(part, str):
                texts.append(part)
            elif isinstance(part, dict):
                if part.get("type") in NON_TEXT_PARTS:
                    raise not_text(part["type"], f"{field}[{i}]")
                text = part.get("text")
                if text is None and part.get("type") in ("text", "input_text", "output_text"):
                    raise APIError("invalid_request", f"Missing text in '{field}[{i}]'",
                                   param=f"{field}[{i}].text")
                if isinstance(text, str):
                    texts.append(text)
            else:
                raise APIError("invalid_request", f"Invalid content part '{field}[{i}]'",
                               param=f"{field}[{i}]")
        return "\n".join(texts)
    if isinstance(content, dict) and isinstance(content.get("text"), str):
        return content["text"]
    raise APIError("invalid_request", f"'{field}' must be a string or a list of parts",
                   param=field)


def decode_arguments(raw: Any, field: str) -> dict:
    """Tool-call arguments as a dict: OpenAI sends a JSON string, others an object."""
    if raw is None or raw == "":
        return {}
    if isinstance(raw, dict):
        return raw
    if isinstance(raw, str):
        try:
            value = json.loads(raw)
        except ValueError as e:
            raise APIError("invalid_request", f"'{field}' is not valid JSON: {e}",
                           param=field) from e
        if isinstance(value, dict):
            return value
    raise APIError("invalid_request", f"'{field}' must be a JSON object", param=field)


def function_tool(name: str, description: str | None, parameters: Any,
                  field: str = "parameters") -> dict:
    """A tool in the OpenAI shape chat templates expect; 400 naming `field` unless its
    parameters are a JSON Schema for an object (None stands for "no parameters")."""
    if parameters is not None:
        check_tool_schema(parameters, field)
    fn: dict[str, Any] = {"name": name}
    if description:
        fn["description"] = description
    fn["parameters"] = parameters if parameters is not None else {"type": "object",
                                                                  "properties": {}}
    return {"type": "function", "function": fn}


def sampling(
    temperature: float | None = None,
    top_p: float | None = None,
    top_k: int | None = None,
    min_p: float | None = None,
    repeat_penalty: float | None = None,
    seed: int | None = None,
) -> Sampling:
    def pick(value, default):
        return default if value is None else value

    return Sampling(
        temperature=pick(temperature, _DEFAULT.temperature),
        top_p=pick(top_p, _DEFAULT.top_p),
        top_k=pick(top_k, _DEFAULT.top_k),
        min_p=pick(min_p, _DEFAULT.min_p),
        repeat_penalty=pick(repeat_penalty, _DEFAULT.repeat_penalty),
        seed=seed,
    )


def continues(messages: tuple[Message, ...], asked: bool | None = None) -> bool:
    """Whether the reply continues the final message instead of starting a new turn: the
    last message is an assistant turn with text and no tool calls (a prefill), and the
    client did not say otherwise (`asked` False). Clients that continue: Open WebUI's
    "Continue Response", agents prefilling the answer, Anthropic's prefill (issue 9, item 3)."""
    if asked is False or not messages:
        return False
    last = messages[-1]
    return (last.role == "assistant" and not last.tool_calls
            and bool(last.content.strip() or (last.reasoning_content or "").strip()))


def stop_tuple(stop: str | list[str] | None) -> tuple[str, ...]:
    if stop is None:
        return ()
    if isinstance(stop, str):
        return (stop,) if stop else ()
    return tuple(s for s in stop if s)


def thinking_from_effort(effort: str | None) -> bool | None:
    """OpenAI's reasoning effort: "none" turns thinking off, any other level on."""
    if effort is None:
        return None
    return effort.strip().lower() != "none"


def json_schema_format(schema: Any, field: str, thinking: bool | None) -> tuple[str | None, bool]:
    """Check a `json_schema` output format. Returns (grammar, thinking): when the request
    does not ask for thinking, thinking is turned off and a GBNF grammar from the schema
    constrains the output (the live engine applies it; a replay ignores it). A thinking model
    is not constrained, since the grammar would apply to its reasoning too."""
    import jsonschema

    if not isinstance(schema, dict):
        raise APIError("invalid_request", f"'{field}' must be a JSON schema object", param=field)
    try:
        jsonschema.validators.validator_for(schema).check_schema(schema)
    except jsonschema.SchemaError as e:
        raise APIError("invalid_request", f"'{field}' is not a valid JSON schema: {e.message}",
                       param=field) from e
    gbnf = schema_grammar(schema, field)  # 400 when no value could match the schema
    if thinking:
        return None, True
    return gbnf, False  # None: not covered, validate only


def check_json_output(text: str, schema: dict) -> str | None:
    """None when `text` is JSON matching `schema`, else a message saying why not."""
    import jsonschema

    try:
        value = json.loads(text)
    except ValueError as e:
        return f"the output is not JSON: {e}"
    try:
        jsonschema.validate(value, schema)
    except jsonschema.ValidationError as e:
        return f"the output does not match the schema: {e.message}"
    return None


def reasoning_budget(budget: Any, effort: str | None = None,
                     field: str = "reasoning_budget") -> int | None:
    """A request's thinking budget (engine/chat/budget.py): `budget` as given (a whole number
    of tokens, 0 for no reasoning; anything else is the caller's 400 naming `field`), else the
    budget `effort` stands for (OpenAI's reasoning_effort), else None (the server's default)."""
    if budget is not None:
        if isinstance(budget, bool) or not isinstance(budget, int) or budget < 0:
            raise APIError("invalid_request", f"'{field}' must be a whole number of tokens, "
                           "0 or more", param=field)
        return budget
    return effort_budget(effort.strip().lower()) if isinstance(effort, str) else None
