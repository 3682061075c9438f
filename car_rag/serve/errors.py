"""What a request is refused with, from below the HTTP layer (the app answers each with its status)."""

__all__ = ["Unavailable", "Forbidden", "INSERT_RETRY_S", "NOT_READY_RETRY_S"]

NOT_READY_RETRY_S = 5
"""``Retry-After`` of a 503 while the retriever loads: loading MiniLM and the indexes takes seconds
(about 3-10 s for the demo to benchmark stores on two cores), so asking sooner is refused again."""

INSERT_RETRY_S = 1
"""``Retry-After`` of a batch the store did not take (nothing of it stored): a failed write is a lock
or a connection that broke mid-write, over by the time the writer asks again."""


class Unavailable(RuntimeError):
    """What the service cannot do now (not ready, the vector store down): a 503 that says why, and
    when to ask again (``retry_after_s``, its ``Retry-After`` header)."""

    def __init__(self, message: str, retry_after_s: int = NOT_READY_RETRY_S):
        super().__init__(message)
        self.retry_after_s = retry_after_s


class Forbidden(PermissionError):
    """A write the key may not make: a 403 that says why; nothing of the request is stored."""
