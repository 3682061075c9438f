"""Names kept for one release after a rename: each still works and warns with the new name,
so a user's code keeps running while it says what to change."""

from __future__ import annotations

import warnings

__all__ = ["warn_renamed"]


def warn_renamed(old: str, new: str, *, stacklevel: int = 3) -> None:
    """A :class:`DeprecationWarning` that ``old`` is now ``new``; ``stacklevel`` 3 points at
    the caller of the function that calls this."""
    warnings.warn(
        f"{old} is deprecated and will be removed in the next release: use {new}", DeprecationWarning, stacklevel=stacklevel
    )
