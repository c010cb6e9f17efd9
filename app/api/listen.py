"""The listening socket and the connection-level limits uvicorn lacks.

Owns `bind(host, port)` (a bound socket, IPv4 or IPv6, so `--port 0` can print the port it
got before serving) and `HeaderTimeoutH11`, uvicorn's h11 protocol with a deadline for a
request's headers. Runs on the asyncio loop's thread (the protocol) and the main thread (bind).

Why a header deadline: uvicorn arms its keep-alive timer only after a response, and disarms it
on any byte received, so a client that opens a connection and sends half a request line
(or nothing) holds a socket and a protocol object forever (issue 10, item 7). Such a
connection is closed `HEADER_TIMEOUT_S` after it opened, or after its previous response, unless
a whole request head has arrived by then. Bodies and streamed replies have no deadline: a long
prompt upload or a long generation is legitimate.
"""

from __future__ import annotations

import asyncio
import socket

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

HEADER_TIMEOUT_S = 10.0


def bind(host: str, port: int) -> socket.socket:
    """A TCP socket bound to (host, port), not yet listening (uvicorn listens on it).
    Raises OSError (port busy, address not here)."""
    family = socket.AF_INET6 if ":" in host.strip("[]") else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host.strip("[]"), port))
    except OSError:
        sock.close()
        raise
    return sock


class HeaderTimeoutH11(H11Protocol):
    """H11Protocol that closes a connection whose request head does not arrive in time."""

    header_timeout_s = HEADER_TIMEOUT_S
    _head_timer: asyncio.TimerHandle | None = None  # armed while a request head is awaited

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm_head_timer()

    def _arm_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
        self._head_timer = self.loop.call_later(self.header_timeout_s, self._head_timed_out)

    def _head_timed_out(self) -> None:
        self._head_timer = None
        # h11 leaves the client's state IDLE until a whole request head has been parsed.
        if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
            self.transport.close()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self._head_timer is not None and self.conn.their_state is not h11.IDLE:
            self._head_timer.cancel()
            self._head_timer = None

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing():
            self._arm_head_timer()  # the next request on this connection gets a deadline too

    def connection_lost(self, exc: Exception | None) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None
        super().connection_lost(exc)
