"""The request guard: every check a request passes before any route runs, in one place.

Owns `Guard` (pure ASGI middleware) and the flag types that configure it (`api_key_arg`,
`positive_int`). Runs on the asyncio loop's thread. docs/design.md, section "Hardening".

Why these checks exist: the server listens on loopback without a key by default (the window
starts it too), so the attacker to keep out is a web page in the user's own browser.

1. **Host** (403). A page on evil.example can re-point its DNS name at 127.0.0.1 ("DNS
   rebinding", Ollama's CVE-2024-28224) and then read replies, /props and /metrics as
   same-origin. Only `Host:` values that name the bound address are served: localhost,
   127.0.0.1, [::1], the `--host` value, `--allow-host` additions. A wildcard bind (0.0.0.0,
   ::) also accepts IP literals and this machine's host name (rebinding needs a DNS name).
2. **Origin / CORS** (403). No CORS header is ever sent unless `--cors-origin ORIGIN` allows
   that origin; then preflights (OPTIONS with Access-Control-Request-Method) are answered here
   and replies carry Access-Control-Allow-Origin. A request from any other cross origin is
   refused outright rather than executed with an unreadable reply.
3. **API key** (401), with `ServerConfig.api_key`: every path but /health needs
   `Authorization: Bearer KEY` or `x-api-key: KEY`. Preflights carry no credentials, so they
   are exempt (they run nothing).
4. **Content-Type** (415). A browser may POST `text/plain`, a form or multipart to any origin
   without a preflight; only `application/json` bodies are read, so such a POST runs nothing.
5. **Body size** (413): at once when Content-Length says so, else when the count passes
   `ServerConfig.max_body_bytes` while reading.

Plain ASGI, not BaseHTTPMiddleware: the latter wraps streaming responses in a way that delays
disconnect detection, and a client that leaves must cancel its job at once.
"""

from __future__ import annotations

import argparse
import ipaddress
import secrets
import socket

from app.api.errors import APIError, error_response
from app.api.state import AppState

OPEN_PATHS = frozenset({"/health", "/v1/health"})
LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
WILDCARD_BINDS = frozenset({"", "0.0.0.0", "::"})
BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})
PREFLIGHT_MAX_AGE = "600"


def host_name(value: str) -> str:
    """The host part of a Host header or --host value, lower-case, without port or brackets:
    "LocalHost:8421" -> "localhost", "[::1]:8421" -> "::1"."""
    value = value.strip().lower()
    if value.startswith("["):
        return value[1:].split("]", 1)[0]
    if value.count(":") == 1:  # name:port (a bare IPv6 address has several colons)
        value = value.split(":", 1)[0]
    return value.rstrip(".")


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def origin_key(origin: str) -> str:
    """An origin as compared: lower-case, no trailing slash."""
    return origin.strip().lower().rstrip("/")


class Guard:
    """ASGI middleware: Host, Origin, API key, Content-Type, then body size."""

    def __init__(self, app, state: AppState) -> None:
        self.app = app
        self.state = state
        config = state.config
        bound = host_name(config.host)
        self.wildcard = bound in WILDCARD_BINDS
        extra = {host_name(h) for h in config.allowed_hosts}
        self.any_host = "*" in extra
        self.hosts = LOOPBACK_NAMES | extra | ({bound} - WILDCARD_BINDS)
        if self.wildcard:
            self.hosts |= {host_name(socket.gethostname())}
        self.any_origin = "*" in config.cors_origins
        self.origins = frozenset(origin_key(o) for o in config.cors_origins)

    # the checks ------------------------------------------------------------------------------

    def _host_ok(self, host: str | None) -> bool:
        if host is None or self.any_host:  # HTTP/1.0 without Host: no browser sends that
            return True
        name = host_name(host)
        return name in self.hosts or (self.wildcard and _is_ip(name))

    def _origin_allowed(self, origin: str, host: str | None) -> bool:
        """A cross origin named by --cors-origin, or the server's own origin (a page it
        served would be same-origin; the Host check has already vouched for the name)."""
        key = origin_key(origin)
        if self.any_origin or key in self.origins:
            return True
        scheme, _, rest = key.partition("://")
        return host is not None and scheme in ("http", "https") and rest == host.lower()

    def _authorized(self, headers: dict[bytes, bytes]) -> bool:
        key = self.state.config.api_key
        if not key:
            return True
        given = headers.get(b"x-api-key", b"").decode("latin-1")
        auth = headers.get(b"authorization", b"").decode("latin-1")
        if auth[:7].lower() == "bearer ":
            given = given or auth[7:].strip()
        return bool(given) and secrets.compare_digest(given.encode(), key.encode())

    # the middleware --------------------------------------------------------------------------

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope["path"]
        method = scope["method"]
        headers = dict(scope["headers"])

        async def refuse(err: APIError) -> None:
            await error_response(path, err)(scope, receive, send)

        raw_host = headers.get(b"host")
        host = raw_host.decode("latin-1") if raw_host is not None else None
        if not self._host_ok(host):
            await refuse(APIError(
                "forbidden", f"Host '{host}' is not served here: this server answers only to "
                "the address it is bound to (start it with --allow-host NAME to add one)",
                code="host_not_allowed"))
            return

        raw_origin = headers.get(b"origin")
        if raw_origin is not None:
            origin = raw_origin.decode("latin-1")
            if not self._origin_allowed(origin, host):
                await refuse(APIError(
                    "forbidden", f"Requests from the web origin '{origin}' are not allowed "
                    "(start the server with --cors-origin ORIGIN to allow one)",
                    code="origin_not_allowed"))
                return
            send = _with_cors(send, origin)
            if method == "OPTIONS" and b"access-control-request-method" in headers:
                await _preflight(headers, send)
                return

        if path not in OPEN_PATHS and not self._authorized(headers):
            await refuse(APIError(
                "authentication", "Invalid or missing API key: send it as "
                "'Authorization: Bearer KEY' or 'x-api-key: KEY'", code="invalid_api_key"))
            return

        declared = headers.get(b"content-length")
        has_body = (declared is not None and declared.strip() not in (b"", b"0")) or (
            b"transfer-encoding" in headers)
        if method in BODY_METHODS and has_body:
            ctype = headers.get(b"content-type", b"").decode("latin-1")
            if ctype.split(";", 1)[0].strip().lower() != "application/json":
                shown = f"'{ctype}'" if ctype else "none"
                await refuse(APIError(
                    "unsupported_media_type", "The request body must be JSON sent with "
                    f"'Content-Type: application/json' (got {shown})",
                    code="unsupported_media_type"))
                return

        limit = self.state.config.max_body_bytes
        if declared is not None and declared.isdigit() and int(declared) > limit:
            await refuse(_too_large(limit))
            return
        seen = 0

        async def counting_receive():
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    raise _too_large(limit)
            return message

        await self.app(scope, counting_receive, send)


def _with_cors(send, origin: str):
    """`send` that adds the CORS headers for an allowed origin to the response start."""
    extra = [(b"access-control-allow-origin", origin.encode("latin-1")),
             (b"vary", b"Origin"),
             (b"access-control-expose-headers", b"Retry-After")]

    async def cors_send(message) -> None:
        if message["type"] == "http.response.start":
            message = {**message, "headers": [*message.get("headers", ()), *extra]}
        await send(message)

    return cors_send


async def _preflight(headers: dict[bytes, bytes], send) -> None:
    """204 for an allowed origin's preflight: any method the API has, the headers asked for
    (SDKs send their own x-stainless-* and anthropic-* headers)."""
    asked = headers.get(b"access-control-request-headers", b"")
    await send({"type": "http.response.start", "status": 204, "headers": [
        (b"access-control-allow-methods", b"GET, POST, OPTIONS"),
        (b"access-control-allow-headers", asked),
        (b"access-control-max-age", PREFLIGHT_MAX_AGE.encode()),
    ]})
    await send({"type": "http.response.body", "body": b""})


def _too_large(limit: int) -> APIError:
    return APIError("too_large", f"The request body is larger than this server accepts "
                    f"({limit} bytes)", code="request_too_large")


# flag types ----------------------------------------------------------------------------------


def api_key_arg(value: str) -> str:
    """--api-key / $PRISM_API_KEY: a blank key (`--api-key "$UNSET"`) would look like
    protection and be none, so it is refused rather than taken as "no key"."""
    if not value.strip():
        raise argparse.ArgumentTypeError(
            "the API key is blank; pass a real key, or leave --api-key and PRISM_API_KEY unset")
    return value


def positive_int(value: str) -> int:
    try:
        n = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {value!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1 (got {n})")
    return n
