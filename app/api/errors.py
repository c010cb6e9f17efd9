"""Errors in the caller's API: one exception type, two wire shapes.

Owns `APIError` (raised by the route modules and the body reader), `api_of(path)` and
`install(app)`, which registers the exception handlers that turn `APIError`, FastAPI/Starlette
HTTP errors (404, 405), template failures, context overflows, replay misses and unexpected
exceptions into:

    OpenAI and Responses:  {"error": {"message", "type", "param", "code"}}
    Anthropic (/v1/messages...):  {"type": "error", "error": {"type", "message"}}

A stream begins at its run's first token (app/api/sse.py), so a run that fails before one is
answered here too, with the status `runs.run_error` gives it. Errors raised after a stream
began cannot change the status code any more; the stream modules send them as a final error
event built with `openai_error_body` / `anthropic_error_body`.
Runs on the asyncio loop's thread.
"""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from engine.chat.template import TemplateError
from engine.grammar.bounds import GrammarTooLarge
from engine.record.replay import ReplayMiss
from engine.service import ContextOverflow

log = logging.getLogger("prism")

# Semantic kind -> (HTTP status, OpenAI type, Anthropic type).
KINDS: dict[str, tuple[int, str, str]] = {
    "invalid_request": (400, "invalid_request_error", "invalid_request_error"),
    "authentication": (401, "authentication_error", "authentication_error"),
    "forbidden": (403, "permission_error", "permission_error"),
    "not_found": (404, "not_found_error", "not_found_error"),
    "method_not_allowed": (405, "invalid_request_error", "invalid_request_error"),
    "too_large": (413, "invalid_request_error", "request_too_large"),
    "unsupported_media_type": (415, "invalid_request_error", "invalid_request_error"),
    "rate_limit": (429, "rate_limit_error", "rate_limit_error"),
    "server": (500, "server_error", "api_error"),
    "unavailable": (503, "unavailable_error", "overloaded_error"),
    "bad_gateway": (502, "upstream_error", "api_error"),  # --upstream: it failed or is gone
    "gateway_timeout": (504, "upstream_error", "api_error"),  # --upstream: it timed out
}
_BY_STATUS = {status: kind for kind, (status, _, _) in KINDS.items()}


def kind_for_status(status: int) -> str:
    """The kind an HTTP status stands for (an upstream's answer): unknown 4xx are invalid
    requests, unknown 5xx server errors."""
    return _BY_STATUS.get(status) or ("invalid_request" if status < 500 else "server")


class APIError(Exception):
    """An error answer. `kind` is a key of KINDS; `param` names the offending field (OpenAI
    reports it; Anthropic's shape has no slot, so the message must name it too)."""

    def __init__(
        self,
        kind: str,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.param = param
        self.code = code
        self.headers = headers or {}

    @property
    def status(self) -> int:
        return KINDS[self.kind][0]


def openai_error_body(err: APIError) -> dict:
    return {
        "error": {
            "message": err.message,
            "type": KINDS[err.kind][1],
            "param": err.param,
            "code": err.code,
        }
    }


def anthropic_error_body(err: APIError) -> dict:
    return {"type": "error", "error": {"type": KINDS[err.kind][2], "message": err.message}}


def api_of(path: str) -> str:
    """The API a path belongs to: for the log, and for the error's shape (Anthropic's for
    /v1/messages, OpenAI's for every other path)."""
    for prefix, api in (("/v1/messages", "anthropic"), ("/v1/responses", "responses"),
                        ("/v1/chat/completions", "openai"), ("/v1/completions", "completions"),
                        ("/v1/embeddings", "embeddings"), ("/models", "models")):
        if path.startswith(prefix):
            return api
    return "-"


def error_response(path: str, err: APIError) -> JSONResponse:
    # Every refused or failed request leaves one line: which API, the status, and why.
    from app.api.redact import client_error  # redact imports this module

    api = api_of(path)
    log.warning("[prism] %s %s %d %s: %s", api, path, err.status, KINDS[err.kind][1],
                err.message)
    err = client_error(err)  # whatever raised it, a client is never told a local path
    body = anthropic_error_body(err) if api == "anthropic" else openai_error_body(err)
    return JSONResponse(body, status_code=err.status, headers=err.headers)


def from_exception(exc: BaseException) -> APIError:
    """The APIError a failure of `Service.submit` (or anything else) stands for."""
    if isinstance(exc, APIError):
        return exc
    if isinstance(exc, ContextOverflow):
        return APIError("invalid_request", str(exc), param="messages",
                        code="context_length_exceeded")
    if isinstance(exc, TemplateError):
        # The template refused this conversation (roles out of order, unsupported content).
        return APIError("invalid_request", str(exc), param="messages", code="template_error")
    if isinstance(exc, GrammarTooLarge):  # a forced call's grammar (engine/grammar/tools.py)
        return APIError("invalid_request", str(exc), param=exc.path, code="schema_too_large")
    if isinstance(exc, ReplayMiss):
        # No recorded output answers this request: refused before any work is queued, so a
        # stream gets the 400 too, not a 200 that ends in an error event (issue 24, item 1).
        return APIError("invalid_request", str(exc), param="messages", code="replay_no_match")
    return APIError("server", f"internal error: {type(exc).__name__}: {exc}")


_TYPE_TAGS = frozenset({"str", "int", "float", "bool", "dict", "list", "none", "bytes"})


def _union_tag(part: object) -> bool:
    """pydantic puts the union member tried into `loc` ('str', 'list[...]', 'ToolIn');
    body fields are snake_case names, so these are told apart by shape."""
    return isinstance(part, str) and (
        part in _TYPE_TAGS or "[" in part or part[:1].isupper()
    )


def validation_message(errors: list[dict], prefix: str = "") -> tuple[str, str | None]:
    """A readable message and the field path (`messages[0].role`) of the first pydantic
    error; `prefix` is the path of the object that was validated."""
    if not errors:
        return "invalid request body", None
    first = errors[0]
    loc = [p for p in first.get("loc", ()) if p != "body" and not _union_tag(p)]
    path = prefix
    for part in loc:
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    msg = first.get("msg", "invalid value")
    if first.get("type") == "missing":
        return f"Missing required field '{path}'", path or None
    return f"Invalid value for '{path}': {msg}", path or None


def install(app: FastAPI) -> None:
    @app.exception_handler(APIError)
    async def _api_error(request: Request, exc: APIError) -> JSONResponse:
        return error_response(request.url.path, exc)

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        message, param = validation_message(list(exc.errors()))
        return error_response(request.url.path, APIError("invalid_request", message, param=param))

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        kind = _BY_STATUS.get(exc.status_code, "invalid_request")
        if exc.status_code == 404:
            message = f"Invalid URL ({request.method} {request.url.path})"
        elif exc.status_code == 405:
            message = f"Method {request.method} not allowed on {request.url.path}"
        else:
            message = str(exc.detail)
        err = APIError(kind, message, headers=dict(exc.headers or {}))
        resp = error_response(request.url.path, err)
        resp.status_code = exc.status_code
        return resp

    @app.exception_handler(ContextOverflow)
    @app.exception_handler(TemplateError)
    @app.exception_handler(ReplayMiss)
    async def _engine(request: Request, exc: Exception) -> JSONResponse:
        return error_response(request.url.path, from_exception(exc))

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("[prism] %s %s failed", request.method, request.url.path)
        return error_response(request.url.path, from_exception(exc))
