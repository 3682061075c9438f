"""What a request is refused with, from below the HTTP layer (the app answers each with its status)."""

__all__ = ["Unavailable", "Forbidden"]


class Unavailable(RuntimeError):
    """What the service cannot do now (not ready, the vector store down): a 503 that says why."""


class Forbidden(PermissionError):
    """A write the key may not make: a 403 that says why; nothing of the request is stored."""
