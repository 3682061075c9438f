"""The outermost ASGI layer of ``car-rag serve``: a request's body is read (and refused past its
limit) before the app sees it, every request is timed into the metrics, every response marked
``nosniff``."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from fastapi.responses import JSONResponse

from car_rag.serve.metrics import Metrics

__all__ = ["RequestEdge"]

_PATHS = frozenset({"/retrieve", "/records", "/healthz", "/readyz", "/metrics", "/docs", "/openapi.json"})
"""The paths the request metrics name; any other is counted as "other" (a label per path a client
makes up would grow without bound)."""


class _Refused(Exception):
    """A request answered before the app sees it (its body is too large, or its length unreadable)."""

    def __init__(self, status: int, detail: str, headers: dict[str, str] | None = None):
        super().__init__(detail)
        self.status, self.detail, self.headers = status, detail, headers


class RequestEdge:
    """Outermost ASGI layer: reads a request's body before the app sees it and refuses one over
    ``max_body`` bytes with 413, declared (Content-Length) or not (chunked), closing the connection
    rather than reading the rest; times every request into the metrics and marks every response
    ``nosniff`` (a JSON string holding retrieved text is never read as HTML)."""

    def __init__(self, app: Any, metrics: Metrics, max_body: int):
        self.app, self.metrics, self.max_body = app, metrics, max_body

    async def __call__(
        self, scope: MutableMapping[str, Any], receive: Callable[[], Awaitable[Any]], send: Callable[[Any], Awaitable[None]]
    ) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started, status = time.perf_counter(), [500]

        async def marked(message: MutableMapping[str, Any]) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
                message["headers"] = [*message.get("headers", []), (b"x-content-type-options", b"nosniff")]
            await send(message)

        try:
            try:
                body = await self._body(scope, receive)
            except _Refused as refused:
                await JSONResponse({"detail": refused.detail}, refused.status, refused.headers)(scope, receive, marked)
                return
            if body is None:
                status[0] = 499  # the client left before it had sent its request
                return
            unread = True

            async def replay() -> Any:
                nonlocal unread
                if unread:
                    unread = False
                    return {"type": "http.request", "body": body, "more_body": False}
                return await receive()  # the app may wait for the client to disconnect

            await self.app(scope, replay, marked)
        finally:
            path = scope["path"] if scope["path"] in _PATHS else "other"
            self.metrics.requests.labels(path, str(status[0])).observe(time.perf_counter() - started)

    async def _body(self, scope: MutableMapping[str, Any], receive: Callable[[], Awaitable[Any]]) -> bytes | None:
        """The whole body, up to ``max_body`` bytes (None: the client disconnected)."""
        too_large = _Refused(413, f"the body is larger than {self.max_body} bytes", {"Connection": "close"})
        length = dict(scope["headers"]).get(b"content-length")
        if length is not None:
            if not length.isdigit():
                raise _Refused(400, "bad Content-Length header")
            if int(length) > self.max_body:
                raise too_large
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return None
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body:
                raise too_large
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)
