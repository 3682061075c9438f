"""The outermost ASGI layer of ``car-rag serve``: what a request's headers alone decide (its Host,
whether a browser sent it from another site, its content type, its API key) is checked before a
byte of its body is read; the body is then read within a size and a time limit before the app
sees it; every request is timed into the metrics, every response marked ``nosniff``."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import anyio
from fastapi.responses import JSONResponse

from car_rag.serve.keys import ApiKey, ApiKeys
from car_rag.serve.metrics import Metrics

__all__ = ["RequestEdge", "Gate", "KEY_STATE", "MISSING_KEY", "UNKNOWN_KEY"]

_PATHS = frozenset({"/retrieve", "/explain", "/records", "/healthz", "/readyz", "/metrics", "/docs", "/openapi.json"})
"""The paths the request metrics name; any other is counted as "other" (a label per path a client
makes up would grow without bound)."""
OPEN_PATHS = frozenset({"/healthz", "/readyz"})
"""Answered without a key on a server with keys (/readyz says only whether it is ready, without one)."""
METRICS_PATHS = frozenset({"/metrics"})
DOCS_PATHS = frozenset({"/docs", "/docs/oauth2-redirect", "/openapi.json", "/redoc"})
KEY_STATE = "car_rag_api_key"
"""Where the edge leaves the key a request presented (``request.state``), for the routes."""
MISSING_KEY = "missing API key: send 'Authorization: Bearer KEY'"
UNKNOWN_KEY = "unknown API key"
_BROWSER_CROSS_SITE = frozenset({b"cross-site", b"same-site"})
"""``Sec-Fetch-Site`` values of a request a page of another origin made (same-site: another port
of localhost, another subdomain)."""


class _Refused(Exception):
    """A request answered before the app sees it."""

    def __init__(self, status: int, detail: str, headers: dict[str, str] | None = None):
        super().__init__(detail)
        self.status, self.detail, self.headers = status, detail, headers


@dataclass(frozen=True)
class Gate:
    """What the edge checks of a request's headers, before its body.

    ``allowed_hosts``: the ``Host`` names (without port) the server answers to; None: any (a
    server with keys, where a browser's rebinding attack has no key to present). ``open_paths``:
    paths answered without a key on a server with keys."""

    api_keys: ApiKeys | None = None
    allowed_hosts: frozenset[str] | None = None
    open_paths: frozenset[str] = OPEN_PATHS
    body_timeout_s: float = 30.0

    @staticmethod
    def paths(*, public_metrics: bool, public_docs: bool) -> frozenset[str]:
        """The paths answered without a key: health, readiness (its detail needs a key), and
        /metrics or the OpenAPI pages where the server was told to show them."""
        return OPEN_PATHS | (METRICS_PATHS if public_metrics else frozenset()) | (DOCS_PATHS if public_docs else frozenset())

    def check(self, scope: MutableMapping[str, Any]) -> ApiKey | None:
        """The key the request presents (None: none, or a server without keys), or :class:`_Refused`."""
        headers: dict[bytes, bytes] = {}
        for name, value in scope["headers"]:
            headers.setdefault(name, value)  # the first of repeated headers, as a proxy would pass it on
        host = headers.get(b"host", b"").decode("latin-1")
        if self.allowed_hosts is not None and _hostname(host) not in self.allowed_hosts:
            raise _Refused(400, f"this server does not answer to Host {host[:100]!r} (car-rag serve --allowed-host)")
        origin = headers.get(b"origin")
        if headers.get(b"sec-fetch-site") in _BROWSER_CROSS_SITE or (origin is not None and not _same_origin(origin, host)):
            raise _Refused(403, "cross-site requests are refused: a page of another origin may not call this server")
        if scope["method"] == "POST":
            media = headers.get(b"content-type", b"").split(b";")[0].strip().lower()
            if media != b"application/json":
                raise _Refused(415, "send the body as JSON with 'Content-Type: application/json'")
        if self.api_keys is None:
            return None
        scheme, _, presented = headers.get(b"authorization", b"").decode("latin-1").partition(" ")
        bearer = presented.strip() if scheme.lower() == "bearer" else ""
        key = self.api_keys.lookup(bearer) if bearer else None
        if key is None and scope["path"] not in self.open_paths:  # an open path answers a bad key as no key
            raise _Refused(401, UNKNOWN_KEY if bearer else MISSING_KEY, {"WWW-Authenticate": "Bearer"})
        return key


def _hostname(host: str) -> str:
    """'example.org' of 'Example.org:8000', '::1' of '[::1]:8000'."""
    host = host.strip().lower()
    if host.startswith("["):
        return host[1 : host.find("]")] if "]" in host else host
    name, colon, port = host.rpartition(":")
    return name if colon and port.isdigit() else host


def _same_origin(origin: bytes, host: str) -> bool:
    """Whether a browser's ``Origin`` names this server as the request reached it (its ``Host``)."""
    parts = urlsplit(origin.decode("latin-1"))
    return parts.scheme in ("http", "https") and parts.netloc.lower() == host.strip().lower()


class RequestEdge:
    """Outermost ASGI layer: refuses, before reading the body, a request whose ``Host`` is not the
    server's (DNS rebinding), that a page of another site sent, that is not JSON, or that lacks a
    valid key where one is needed (:class:`Gate`); then reads the body, refusing one over
    ``max_body`` bytes with 413, declared (Content-Length) or not (chunked), and one that has not
    arrived within ``gate.body_timeout_s`` with 408, closing the connection rather than reading the
    rest; times every request into the metrics and marks every response ``nosniff`` (a JSON string
    holding retrieved text is never read as HTML)."""

    def __init__(self, app: Any, metrics: Metrics, max_body: int, gate: Gate | None = None):
        self.app, self.metrics, self.max_body, self.gate = app, metrics, max_body, gate or Gate()

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
                key = self.gate.check(scope)
                body = await self._body(scope, receive)
            except _Refused as refused:
                headers = {"Connection": "close", **(refused.headers or {})}  # the body is left unread
                await JSONResponse({"detail": refused.detail}, refused.status, headers)(scope, receive, marked)
                return
            if body is None:
                status[0] = 499  # the client left before it had sent its request
                return
            scope.setdefault("state", {})[KEY_STATE] = key
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
        """The whole body, up to ``max_body`` bytes and within the gate's time (None: the client
        disconnected): a client sending a byte at a time holds a connection that long, no longer."""
        too_large = _Refused(413, f"the body is larger than {self.max_body} bytes")
        length = dict(scope["headers"]).get(b"content-length")
        if length is not None:
            if not length.isdigit():
                raise _Refused(400, "bad Content-Length header")
            if int(length) > self.max_body:
                raise too_large
        chunks, size = [], 0
        with anyio.move_on_after(self.gate.body_timeout_s) as waited:
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
        assert waited.cancelled_caught
        raise _Refused(408, f"the body did not arrive within {self.gate.body_timeout_s:g} s")
