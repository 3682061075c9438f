"""What both parity scripts share: the corpus embeddings cached between runs (and between the two
scripts: the same MiniLM vectors for the same texts), wall-clock timing, and the stores they run on."""

from __future__ import annotations

import hashlib
import os
import platform
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

PAPER_STAGE1: dict[str, Any] = {"fusion": "rrf", "latent_scope": False}
"""The core's Stage 1 as a single-channel retriever a framework wraps: the top k1 fused hits,
no latent-scope step (a framework's CARRetriever resolves the anchors its own retriever
gives). End-to-end columns then compare like with like; the same-anchors column never
depended on it."""

STORES = ("chroma", "memory", "pgvector")
"""Every store each framework's tests run Stage 2 on: Chroma, the framework's in-memory default,
PostgreSQL + pgvector (``car_rag.postgres.fixture``)."""


def corpus_vectors(texts: Sequence[str], model_name: str, encode: Callable[[list[str]], Any], path: Path | None) -> np.ndarray:
    """``encode(texts)`` as float32, or the vectors saved in ``path`` (``.npz``) by an earlier run on
    the same texts with the same model (checked by a digest of both; anything else re-encodes)."""
    key = hashlib.sha256("\x00".join([model_name, *texts]).encode()).hexdigest()
    if path is not None and path.is_file():
        saved = np.load(path)
        if str(saved["key"]) == key:
            return np.asarray(saved["vectors"], dtype=np.float32)
        print(f"{path}: embeddings of other texts or another model, re-encoding")
    started = time.perf_counter()
    vectors = np.asarray(encode(list(texts)), dtype=np.float32)
    print(f"embedded {len(texts)} records in {time.perf_counter() - started:.0f} s", flush=True)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        np.savez(path, key=np.array(key), vectors=vectors)
    return vectors


def timed(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[Any, float]:
    """``fn(*args, **kwargs)`` and its wall-clock time in milliseconds."""
    started = time.perf_counter()
    out = fn(*args, **kwargs)
    return out, (time.perf_counter() - started) * 1000


def machine() -> str:
    """Where the timings were taken."""
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        usable = os.cpu_count() or 1
    threads = os.environ.get("OMP_NUM_THREADS")
    return f"{platform.machine()}, {usable} usable CPU(s) of {os.cpu_count()}, OMP_NUM_THREADS={threads}"
