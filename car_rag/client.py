"""A client for ``car-rag serve``: retrieval from a store another process holds (one
PostgreSQL-backed store shared by N framework apps), with the API key, timeouts and retries.

It asks ``POST /retrieve`` for whole records (``with_records``) and hands back each ranked
record with its ``car_*`` annotations, which the framework wrappers
(``llama_index.retrievers.car.CARServiceRetriever``, ``langchain_car.CARServiceRetriever``) lay
out exactly as their in-process retrievers do (:class:`car_rag.layout.RecordLayout`);
``POST /explain`` for a record's authority chain (``car-rag mcp --url``'s ``explain``).

Retried: only what cannot have reached the store twice or was refused for now: a connection
that could not be made, and a 503 that says when to come back (``Retry-After``). Never a
timeout after the request was sent, a 401/403 or a 4xx about the request. Errors:
:class:`CARServiceUnavailable` (down, timed out, busy), :class:`CARAuthError` (401/403),
:class:`CARRequestError` (the server refused the request, e.g. 422), each a
:class:`CARServiceError` naming the URL.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from car_rag.eligibility import CallerContext
from car_rag.extras import MissingExtraError
from car_rag.records import Record

try:
    import httpx
    from tenacity import AsyncRetrying, RetryCallState, Retrying, retry_if_exception, stop_after_attempt, wait_exponential
except ImportError as exc:  # pragma: no cover - both come with the client extra (and with either framework)
    raise MissingExtraError(
        f"car_rag.client needs httpx and tenacity ({exc.name} is not installed): pip install 'car-rag[client]'"
    ) from exc

__all__ = [
    "CARAuthError",
    "CARRequestError",
    "CARServiceClient",
    "CARServiceError",
    "CARServiceUnavailable",
    "ServedRecord",
]

MAX_RETRY_AFTER_S = 30.0
"""The longest ``Retry-After`` the client waits out; a server asking for longer is reported unavailable."""


class CARServiceError(RuntimeError):
    """What went wrong talking to a ``car-rag serve``; ``url`` is the endpoint asked."""

    def __init__(self, message: str, url: str, status: int | None = None):
        super().__init__(message)
        self.url = url
        self.status = status


class CARServiceUnavailable(CARServiceError):
    """The server could not be reached, did not answer within the timeout, or said it is not ready (503)."""


class CARAuthError(CARServiceError):
    """The server refused the API key: missing or unknown (401), or not allowed this (403)."""


class CARRequestError(CARServiceError):
    """The server refused the request itself (400, 413, 422, ...): its detail says which field."""


class _RetryAfter(Exception):
    """A 503 with ``Retry-After``: worth asking again after that many seconds."""

    def __init__(self, response: httpx.Response, seconds: float):
        super().__init__(f"503, retry after {seconds:g} s")
        self.response = response
        self.seconds = seconds


def _retryable(exc: BaseException) -> bool:
    # ConnectTimeout is a ConnectError's sibling: neither sent a byte of the request.
    return isinstance(exc, (httpx.ConnectError, httpx.ConnectTimeout, _RetryAfter))


@dataclass(frozen=True)
class ServedRecord:
    """One record of the server's ranking: the record, the ``car_*`` annotations the in-process
    retrievers write for it, and its score as they score it: an anchor's fused Stage-1 score; a
    record brought in by an anchor, that anchor's; a scope match (or a record whose anchor is
    unknown), the best anchor's."""

    record: Record
    annotations: dict[str, Any]
    score: float | None


class CARServiceClient:
    """``POST /retrieve`` on a ``car-rag serve`` at ``url``, sync or async.

    Args:
        url: the server's base URL (``http://127.0.0.1:8000``).
        api_key: sent as ``Authorization: Bearer KEY`` (the server's ``--api-keys``).
        timeout_s: how long the server may keep the client waiting for its answer (httpx's read
            and write timeouts; a server's own deadline, ``--timeout-ms``, is 2 s by default).
        connect_timeout_s: how long making the connection may take (at most ``timeout_s``).
        retries: further attempts after a connection that could not be made or a 503 with
            ``Retry-After`` (exponential back-off from ``backoff_s``, or the server's ``Retry-After``).
        caller: for a server without keys only: whose records to read (a server with keys
            takes the caller from the key and refuses this).
    """

    def __init__(
        self,
        url: str,
        *,
        api_key: str | None = None,
        timeout_s: float = 30.0,
        connect_timeout_s: float = 5.0,
        retries: int = 2,
        backoff_s: float = 0.25,
        caller: CallerContext | None = None,
    ):
        if timeout_s <= 0 or connect_timeout_s <= 0:
            raise ValueError(f"timeouts must be positive, got timeout_s={timeout_s}, connect_timeout_s={connect_timeout_s}")
        if retries < 0:
            raise ValueError(f"retries must be 0 or more, got {retries}")
        self.url = url.rstrip("/")
        self.endpoint = f"{self.url}/retrieve"
        self.timeout_s = timeout_s
        self.retries = retries
        self.backoff_s = backoff_s
        self.caller = caller
        self._timeout = httpx.Timeout(timeout_s, connect=min(connect_timeout_s, timeout_s))
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.Client(timeout=self._timeout, headers=self._headers)

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> CARServiceClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ requests
    def body(self, query: str, k: int, **options: Any) -> dict[str, Any]:
        """The ``/retrieve`` body: ``query``, ``k``, the caller if one was given, and ``options``
        that are not None (``format``, ``with_records``, ``token_budget``; ``as_of`` and ``filters``
        only where given, for a server that takes them)."""
        body: dict[str, Any] = {"query": query, "k": k, **self._as_caller()}
        body.update({name: value for name, value in options.items() if value is not None})
        return body

    def _attempts(self) -> dict[str, Any]:
        return {
            "retry": retry_if_exception(_retryable),
            "stop": stop_after_attempt(self.retries + 1),
            "wait": self._wait,
            "reraise": True,
        }

    def _wait(self, state: RetryCallState) -> float:
        exc = state.outcome.exception() if state.outcome is not None else None
        if isinstance(exc, _RetryAfter):
            return exc.seconds
        return float(wait_exponential(multiplier=self.backoff_s, max=5.0)(state))

    def answer(self, query: str, k: int = 5, **options: Any) -> dict[str, Any]:
        """The server's whole JSON answer for ``query`` (the ``car-rag serve`` contract); ``options``
        as :meth:`body` takes them (``format="plain"``: the plain evidence as ``evidence_pack.text``)."""
        return self._post(self.endpoint, self.body(query, k, **options))

    def explain(self, doc_id: str) -> dict[str, Any]:
        """The authority chain of ``doc_id`` as the key may see it (``POST /explain``): its status, the
        active records that control it, each edge up to them. A record that does not exist, or that
        the key may not read, is a :class:`CARRequestError` (404) in the same words."""
        return self._post(f"{self.url}/explain", {"doc_id": doc_id, **self._as_caller()})

    def _as_caller(self) -> dict[str, Any]:
        """The body's ``caller`` where one was given (a server without keys)."""
        if self.caller is None:
            return {}
        return {"caller": {"tenant": self.caller.tenant, "principals": sorted(self.caller.principals)}}

    def _post(self, endpoint: str, body: dict[str, Any]) -> dict[str, Any]:
        try:
            for attempt in Retrying(**self._attempts()):
                with attempt:
                    return self._read(self._client.post(endpoint, json=body), endpoint)
        except (httpx.TransportError, _RetryAfter) as exc:
            raise self._unavailable(exc, endpoint) from exc
        raise AssertionError("unreachable: tenacity returns or raises")  # pragma: no cover

    async def aanswer(self, query: str, k: int = 5, **options: Any) -> dict[str, Any]:
        """:meth:`answer` on an async connection (one per call: it belongs to the caller's event loop)."""
        body = self.body(query, k, **options)
        try:
            async with httpx.AsyncClient(timeout=self._timeout, headers=self._headers) as client:
                async for attempt in AsyncRetrying(**self._attempts()):
                    with attempt:
                        return self._read(await client.post(self.endpoint, json=body), self.endpoint)
        except (httpx.TransportError, _RetryAfter) as exc:
            raise self._unavailable(exc, self.endpoint) from exc
        raise AssertionError("unreachable: tenacity returns or raises")  # pragma: no cover

    def retrieve(self, query: str, k: int = 5, **options: Any) -> list[ServedRecord]:
        """The top ``k`` records for ``query``, ranked by the server, with their annotations."""
        return served_records(self.answer(query, k, with_records=True, **options), self.endpoint)

    async def aretrieve(self, query: str, k: int = 5, **options: Any) -> list[ServedRecord]:
        """Async :meth:`retrieve`."""
        return served_records(await self.aanswer(query, k, with_records=True, **options), self.endpoint)

    # ------------------------------------------------------------------ answers
    def _read(self, response: httpx.Response, endpoint: str) -> dict[str, Any]:
        status = response.status_code
        if status == 200:
            try:
                data = response.json()
            except ValueError as exc:
                raise CARServiceError(f"{endpoint} answered 200 with a body that is not JSON: {exc}", endpoint, 200) from None
            if not isinstance(data, dict):
                raise CARServiceError(f"{endpoint} answered 200 with {type(data).__name__}, not an object", endpoint)
            return data
        detail = _detail(response)
        if status in (401, 403):
            what = "no key was sent" if not self._headers else "the key was refused"
            if status == 403:
                what = "the key may not do this"
            raise CARAuthError(f"{endpoint}: {status}: {what}: {detail}", endpoint, status)
        if status == 503:
            wait = _retry_after(response)
            if wait is not None and wait <= MAX_RETRY_AFTER_S:
                raise _RetryAfter(response, wait)
            raise CARServiceUnavailable(f"{endpoint}: 503, not available: {detail}", endpoint, 503)
        if 400 <= status < 500:
            raise CARRequestError(f"{endpoint}: {status}: the request was refused: {detail}", endpoint, status)
        raise CARServiceUnavailable(f"{endpoint}: {status}: {detail}", endpoint, status)

    def _unavailable(self, exc: Exception, endpoint: str) -> CARServiceUnavailable:
        tries = f" ({self.retries + 1} attempts)" if self.retries else ""
        if isinstance(exc, _RetryAfter):
            detail = _detail(exc.response)
            return CARServiceUnavailable(f"{endpoint}: 503, still not available{tries}: {detail}", endpoint, 503)
        if isinstance(exc, httpx.TimeoutException):
            phase = "connecting" if isinstance(exc, httpx.ConnectTimeout) else "waiting for the answer"
            return CARServiceUnavailable(
                f"car-rag serve at {self.url} did not answer within the timeout ({self.timeout_s:g} s, "
                f"{phase}){tries}: {type(exc).__name__}",
                endpoint,
            )
        return CARServiceUnavailable(f"cannot reach car-rag serve at {self.url}{tries}: {type(exc).__name__}: {exc}", endpoint)


def _detail(response: httpx.Response) -> str:
    try:
        data = response.json()
    except ValueError:
        return response.text[:300] or response.reason_phrase
    return str(data.get("detail", data) if isinstance(data, dict) else data)[:1000]


def _retry_after(response: httpx.Response) -> float | None:
    """``Retry-After`` in seconds (its HTTP-date form is not honoured: None)."""
    value = response.headers.get("retry-after")
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None


def served_records(answer: Mapping[str, Any], endpoint: str) -> list[ServedRecord]:
    """The ranked records of a ``/retrieve`` answer asked ``with_records``, scored as the
    in-process retrievers score them. A ranked record without its record (a server older than
    ``with_records``) raises :class:`CARServiceError` saying so."""
    ranked, candidates = answer.get("reranked"), answer.get("candidates")
    if not isinstance(ranked, list) or not isinstance(candidates, list):
        raise CARServiceError(f"{endpoint}: the answer has no 'reranked' and 'candidates' lists", endpoint)
    scores = {c["doc_id"]: float(c["score"]) for c in candidates if c.get("anchor")}
    best = max(scores.values(), default=None)
    out = []
    for item in ranked:
        if not isinstance(item.get("record"), Mapping) or not isinstance(item.get("annotations"), Mapping):
            raise CARServiceError(
                f"{endpoint}: ranked record {item.get('doc_id')!r} came without its record: the server predates "
                "with_records (upgrade car-rag serve)",
                endpoint,
            )
        doc_id = item["doc_id"]
        chain = best if item.get("role") == "scope_match" else scores.get(item.get("anchor_id") or "", best)
        out.append(ServedRecord(Record.model_validate(item["record"]), dict(item["annotations"]), scores.get(doc_id, chain)))
    return out
