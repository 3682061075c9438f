"""``car-rag serve``'s routes (FastAPI): POST /retrieve, POST /explain, POST /records, GET /healthz, /readyz,
/metrics, each request's API key deciding its caller; the :class:`~car_rag.serve.service.Service`
answers them, inside the :class:`~car_rag.serve.asgi.RequestEdge`."""

from __future__ import annotations

import json
import math
import threading
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from typing import Annotated, Any

import anyio
from fastapi import Depends, FastAPI, HTTPException, Request, Security
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from prometheus_client import CONTENT_TYPE_LATEST

from car_rag import __version__
from car_rag.eligibility import CallerContext
from car_rag.records import Record
from car_rag.serve.asgi import KEY_STATE, MISSING_KEY, Gate, RequestEdge
from car_rag.serve.errors import NOT_READY_RETRY_S, Forbidden, Unavailable
from car_rag.serve.keys import ApiKey
from car_rag.serve.schema import (
    Caller,
    ExplainRequest,
    RecordsRejected,
    RecordsResponse,
    RetrieveRequest,
    RetrieveResponse,
    unstorable,
)
from car_rag.serve.service import Service

__all__ = ["create_app"]


_RECORDS_BODY = {
    "requestBody": {
        "required": True,
        "description": "one record, or a list of them, in the neutral format (README, Records)",
        "content": {
            "application/json": {
                "schema": {"anyOf": [Record.model_json_schema(), {"type": "array", "items": Record.model_json_schema()}]}
            }
        },
    }
}


_BEARER = HTTPBearer(auto_error=False, description="an API key of the server's keys file")


def _authenticate(
    request: Request, _credentials: Annotated[HTTPAuthorizationCredentials | None, Security(_BEARER)]
) -> ApiKey | None:
    """The key the :class:`~car_rag.serve.asgi.RequestEdge` found before the body was read (None on
    a server without keys); 401 without one (``_credentials``: the scheme, for the OpenAPI document)."""
    key: ApiKey | None = getattr(request.state, KEY_STATE, None)
    if key is None and request.app.state.service.api_keys is not None:
        raise HTTPException(401, MISSING_KEY, {"WWW-Authenticate": "Bearer"})
    return key


Key = Annotated[ApiKey | None, Depends(_authenticate)]


def _caller(key: ApiKey | None, asked: Caller | None) -> CallerContext | None:
    """Who a request reads as: its key's caller; on a server without keys, the body's (400 with a key)."""
    if key is not None and asked is not None:
        raise HTTPException(400, "this server takes the caller from the API key: leave 'caller' out of the body")
    if key is not None:
        return key.caller
    return None if asked is None else CallerContext(asked.tenant, frozenset(asked.principals))


def create_app(
    service: Service,
    *,
    max_body_bytes: int = 16 * 2**20,
    body_timeout_s: float = 30.0,
    allowed_hosts: Iterable[str] | None = None,
    public_metrics: bool = False,
    public_docs: bool = False,
) -> Any:
    """The ASGI application over ``service`` (the retriever is built when the app starts, so the
    port opens at once and /readyz says when it can answer).

    On a server with keys, /metrics, the detail of /readyz and the OpenAPI pages need a key unless
    ``public_metrics`` / ``public_docs``; ``allowed_hosts``: the ``Host`` names it answers to (None:
    any); a body has ``body_timeout_s`` to arrive (:class:`~car_rag.serve.asgi.RequestEdge`)."""
    gate = Gate(
        service.api_keys,
        None if allowed_hosts is None else frozenset(h.lower() for h in allowed_hosts),
        Gate.paths(public_metrics=public_metrics, public_docs=public_docs),
        body_timeout_s,
    )

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        threading.Thread(target=service.load, name="car-rag-load", daemon=True).start()
        yield
        service.close()

    app = FastAPI(
        title="car-rag",
        version=__version__,
        lifespan=lifespan,
        description="Controlling Authority Retrieval: the records a question is about, the ones that void them, "
        "and which control.",
    )
    app.state.service = service

    @app.exception_handler(RequestValidationError)
    async def invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        # FastAPI's default echoes each bad value ("input"): a 100k-character query, or text, back.
        errors = [{"loc": list(e.get("loc", ())), "msg": e.get("msg", ""), "type": e.get("type", "")} for e in exc.errors()]
        return JSONResponse({"detail": errors}, 422)

    @app.exception_handler(Unavailable)
    async def unavailable(_: Request, exc: Unavailable) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, 503, {"Retry-After": str(exc.retry_after_s)})

    @app.exception_handler(Forbidden)
    async def forbidden(_: Request, exc: Forbidden) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, 403)

    @app.post(
        "/retrieve",
        response_model=RetrieveResponse,
        responses={
            400: {"description": "a caller in the body of a server with API keys; an as_of or filter it cannot read"},
            401: {"description": "no or unknown key"},
            503: {"description": "not ready, or no answer within the deadline"},
        },
    )
    async def retrieve(body: RetrieveRequest, key: Key) -> RetrieveResponse:
        """Rank the controlling records for a question: candidates, the final ranking, the evidence, diagnostics."""
        caller = _caller(key, body.caller)
        try:
            service.asked(body)  # a bad as_of or filter is the request's fault: 400 naming it, before any search
        except ValueError as exc:
            raise HTTPException(400, str(exc)) from None
        try:
            with anyio.fail_after(service.timeout_s):
                return await anyio.to_thread.run_sync(service.answer, body, caller, abandon_on_cancel=True)
        except TimeoutError:
            # The abandoned search still runs for up to a deadline: asking again sooner lands on the same busy store.
            busy = {"Retry-After": str(max(1, math.ceil(service.timeout_s)))}
            raise HTTPException(503, f"no answer within {service.timeout_s * 1000:.0f} ms: the store is busy", busy) from None

    @app.post(
        "/explain",
        responses={
            400: {"description": "a caller in the body of a server with API keys"},
            401: {"description": "no or unknown key"},
            404: {"description": "no record of that doc_id that this key may read"},
            501: {"description": "a server with Stage 2 in SQL (--stage2 sql) holds no graph to follow"},
            503: {"description": "not ready"},
        },
    )
    async def explain(body: ExplainRequest, key: Key) -> dict[str, Any]:
        """The authority chain of one record: its status, the active records that control it, each
        supersession edge from it up to them; records the key may not read are never named."""
        caller = _caller(key, body.caller)
        try:
            return await anyio.to_thread.run_sync(service.explain, body.doc_id, caller)
        except KeyError as exc:
            raise HTTPException(404, exc.args[0]) from None
        except NotImplementedError as exc:
            raise HTTPException(501, str(exc)) from None

    @app.post(
        "/records",
        response_model=RecordsResponse,
        openapi_extra=_RECORDS_BODY,
        responses={
            401: {"description": "no or unknown key"},
            403: {"description": "the key may not write these records"},
            413: {"description": "body too large"},
            422: {"model": RecordsRejected, "description": "nothing was stored"},
            503: {"description": "the store did not take the batch; nothing was stored"},
        },
    )
    async def records(request: Request, key: Key) -> Any:
        """Add or replace records (idempotent by doc_id), all or none; says what they voided."""
        if key is not None and not key.write:
            raise HTTPException(403, f"key {key.name!r} may not write records")
        try:
            data = json.loads(await request.body())
        except (ValueError, RecursionError) as exc:  # RecursionError: nesting deeper than the parser goes
            return JSONResponse(RecordsRejected(detail=f"the body is not JSON: {exc}", errors=[]).model_dump(), 422)
        items = data if isinstance(data, list) else [data]
        if not items:
            return JSONResponse(RecordsRejected(detail="no records in the body", errors=[]).model_dump(), 422)
        if problems := unstorable(items):
            return JSONResponse(
                RecordsRejected(
                    detail=f"{len(problems)} fields cannot be stored; nothing was stored", errors=problems
                ).model_dump(),
                422,
            )
        if key is not None and key.tenant is not None:
            for number, item in enumerate(items, start=1):
                if not isinstance(item, dict) or item.get("tenant") != key.tenant:
                    doc_id = item.get("doc_id") if isinstance(item, dict) else None
                    raise HTTPException(
                        403,
                        f"key {key.name!r} writes records of tenant {key.tenant!r} only: record {number} "
                        f"({doc_id!r}) is not one; nothing was stored",
                    )
        outcome = await anyio.to_thread.run_sync(service.insert, items, key)
        if isinstance(outcome, RecordsRejected):
            return JSONResponse(outcome.model_dump(), 422)
        return outcome

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        """The process answers."""
        return {"status": "ok"}

    @app.get("/readyz", responses={503: {"description": "not ready, and why"}})
    async def readyz(request: Request) -> JSONResponse:
        """The store is open, the retriever (with its model) is loaded and, for a shared store, its
        database answers. The detail (store size, head, why not ready) needs a key on a server with
        keys, unless its metrics are public."""
        reason = service.readiness()
        body: dict[str, Any] = {"ready": reason is None}
        if service.api_keys is None or public_metrics or getattr(request.state, KEY_STATE, None) is not None:
            body |= {
                "records": len(service.store),
                "anchors": service.anchors,
                "auth": "api-keys" if service.api_keys is not None else "none",
                "head": service.store.head,
            }
            if reason:
                body["reason"] = reason
        return JSONResponse(body, 200) if reason is None else JSONResponse(body, 503, {"Retry-After": str(NOT_READY_RETRY_S)})

    @app.get("/metrics")
    async def metrics() -> Response:
        """Prometheus text: request latency by path and status, /retrieve stages, degraded answers, store size."""
        return Response(service.metrics.text(), media_type=CONTENT_TYPE_LATEST)

    return RequestEdge(app, service.metrics, max_body_bytes, gate)
