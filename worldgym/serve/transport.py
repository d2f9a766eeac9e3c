"""What ``worldgym serve`` adds to uvicorn: a bound on handshake time, one log line per refused connection,
and the file-descriptor room its connection limit needs."""

from __future__ import annotations

import asyncio
import logging
import resource
from typing import Any

from uvicorn.protocols.http.auto import AutoHTTPProtocol

__all__ = ["OneLineAcceptErrors", "handshake_timeout_protocol", "raise_open_file_limit"]

logger = logging.getLogger("worldgym.serve")
FD_MARGIN = 64  # descriptors kept for the process itself (logs, env data files, the listening socket)


def handshake_timeout_protocol(timeout_s: float) -> type[asyncio.Protocol]:
    """uvicorn's HTTP protocol, closing a connection that has not sent its first request's headers (an HTTP
    request or a WebSocket upgrade) within ``timeout_s``: a client dribbling a handshake holds no slot for long.
    Later requests on a kept-alive connection are bounded by uvicorn's ``timeout_keep_alive``."""

    class HandshakeTimeoutProtocol(AutoHTTPProtocol):  # type: ignore[misc, valid-type]
        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            self._handshake_timer = self.loop.call_later(timeout_s, self._handshake_expired)

        def connection_lost(self, exc: Exception | None) -> None:
            self._handshake_timer.cancel()
            super().connection_lost(exc)

        def _handshake_expired(self) -> None:
            upgraded = self not in self.connections  # a WebSocket protocol took over the transport
            if self.cycle is None and not upgraded and not self.transport.is_closing():
                client = f"{self.client[0]}:{self.client[1]}" if self.client else "a client"
                logger.warning("closed %s: no request headers within %.0f s", client, timeout_s)
                self.transport.close()

    return HandshakeTimeoutProtocol


class OneLineAcceptErrors(logging.Filter):
    """Log asyncio's "socket.accept() out of system resource" (no descriptor left for a new client) as one line,
    not a traceback each time the loop retries."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and "socket.accept()" in str(record.msg):
            error = record.exc_info[1]
            record.msg, record.args, record.exc_info = f"{record.msg}: {error}", None, None
        return True


def raise_open_file_limit(connections: int) -> int:
    """Raise the soft open-file limit towards the hard one so ``connections`` sockets fit; return how many
    connections fit (``connections`` or fewer, with a warning)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = connections + FD_MARGIN
    if soft != resource.RLIM_INFINITY and soft < wanted:
        target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        soft = target
    fit = connections if soft == resource.RLIM_INFINITY else min(connections, soft - FD_MARGIN)
    if fit < connections:
        logger.warning("the open-file limit (%d) fits %d connections, not %d: serving at most %d", soft, fit,
                       connections, fit)
    return max(fit, 1)
