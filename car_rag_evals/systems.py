"""The retrieval systems a benchmark compares, behind one small interface.

Every system answers a question with a ranking of doc ids (best first) and, when it has a
Stage 1, the anchors it found; all of them read the same store, so they rank the same
corpus with the same model.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from car_rag.channels import LexicalIndex, make_lexical_index, reciprocal_rank_fusion
from car_rag.eval.audit import doc_ids_of
from car_rag.resolution import ResolutionMode
from car_rag.retriever import AnchorMode, ControllingAuthorityRetriever
from car_rag.store import CARStore
from car_rag_evals.framework_systems import FRAMEWORK_LABELS, langchain_ensemble_retriever, llamaindex_fusion_retriever

__all__ = [
    "DO_NO_HARM",
    "FRAMEWORK_SYSTEMS",
    "SystemOutput",
    "System",
    "SYSTEMS",
    "build_system",
    "embedding_system",
    "rank_bm25_index",
]


@dataclass
class SystemOutput:
    doc_ids: list[str]
    anchors: list[str] | None
    ms: float
    stage23_ms: float | None = None
    """car-rag systems: authority resolution and frontier alone (Stages 2+3)."""


class System(ABC):
    """A named retriever: question in, ranked ids out."""

    def __init__(self, name: str, label: str):
        self.name = name
        self.label = label

    @abstractmethod
    def _rank(self, query: str) -> tuple[list[str], list[str] | None]: ...

    def run(self, query: str) -> SystemOutput:
        started = time.perf_counter()
        ids, anchors = self._rank(query)
        return SystemOutput(ids, anchors, (time.perf_counter() - started) * 1000, self._stage23_ms)

    _stage23_ms: float | None = None


class _Lexical(System):
    def __init__(self, name: str, label: str, index: LexicalIndex, depth: int):
        super().__init__(name, label)
        self.index, self.depth = index, depth

    def _rank(self, query: str) -> tuple[list[str], None]:
        return [h.doc_id for h in self.index.search(query, self.depth)], None


class _Dense(System):
    """MiniLM nearest neighbours of the query's vector: the query's embedding, or what
    ``embed`` makes of the query (the ablation's rewrite and HyDE)."""

    def __init__(self, name: str, label: str, store: CARStore, depth: int, embed: Callable[[str], Any] | None = None):
        super().__init__(name, label)
        self.store, self.depth = store, depth
        self.embed = embed or (lambda query: store.embedder.encode([query])[0])

    def _rank(self, query: str) -> tuple[list[str], None]:
        return [h.doc_id for h in self.store.dense.search(self.embed(query), self.depth)], None


class _Hybrid(_Dense):
    """BM25 on the query's words and the dense ranking of its vector, fused by RRF."""

    def _rank(self, query: str) -> tuple[list[str], None]:
        dense = self.store.dense.search(self.embed(query), self.depth)
        runs = {"bm25": self.store.lexical.search(query, self.depth), "dense": dense}
        return [h.doc_id for h in reciprocal_rank_fusion(runs, k=self.depth)], None


class _CAR(System):
    def __init__(self, name: str, label: str, retriever: ControllingAuthorityRetriever):
        super().__init__(name, label)
        self.retriever = retriever

    def _rank(self, query: str) -> tuple[list[str], list[str]]:
        result = self.retriever.retrieve(query)
        self._stage23_ms = result.timings_ms["stage23"]
        return result.doc_ids(), [h.doc_id for h in result.anchors]


class _Framework(System):
    """A framework's retriever (LlamaIndex, LangChain): whatever it returns, as doc ids."""

    def __init__(self, name: str, retrieve: Callable[[str], Any], depth: int):
        super().__init__(name, FRAMEWORK_LABELS[name])
        self.retrieve, self.depth = retrieve, depth

    def _rank(self, query: str) -> tuple[list[str], None]:
        return doc_ids_of(self.retrieve(query))[: self.depth], None


def rank_bm25_index(store: CARStore) -> LexicalIndex:
    """A rank-bm25 index over the store's records, in ingest order (the paper's BM25)."""
    index = make_lexical_index("rank-bm25")
    ids = store.lexical.doc_ids
    index.build(ids, [store.records[d].text for d in ids])
    return index


def _car(
    name: str, label: str, anchors: AnchorMode, k1: int, resolution: ResolutionMode = "rules", lexical: Callable | None = None
):
    """A paper-style two-stage system: the top ``k1`` of RRF-fused anchors, no latent scope."""

    def build(store: CARStore, depth: int) -> System:
        retriever = ControllingAuthorityRetriever(
            store,
            anchors=anchors,
            k1=k1,
            depth=max(depth, k1),
            resolution=resolution,
            lexical=lexical(store) if lexical else None,
            fusion="rrf",
            latent_scope=False,
        )
        return _CAR(name, label, retriever)

    return build


DO_NO_HARM: dict[str, tuple[str, dict[str, Any]]] = {
    "car-default": ("car-rag defaults (calibrated hybrid, latent scope)", {}),
    "car-no-latent-scope": ("car-rag defaults, --no-latent-scope", {"latent_scope": False}),
    "car-bm25-no-latent-scope": (
        "car-rag --anchors bm25 --no-latent-scope (the paper's two-stage shape)",
        {"anchors": "bm25", "latent_scope": False},
    ),
}
"""The configurations the do-no-harm rule compares (issue 30): label and the retriever options
the CLI's flags set (none; ``--no-latent-scope``; ``--anchors bm25 --no-latent-scope``), every
other option the CLI's default. The defaults must score at least both others on every dev suite."""


def _cli(name: str) -> Callable[[CARStore, int], System]:
    label, options = DO_NO_HARM[name]
    return lambda store, depth: _CAR(name, label, ControllingAuthorityRetriever(store, **options))


SYSTEMS: dict[str, Callable[[CARStore, int], System]] = {
    **{name: _cli(name) for name in DO_NO_HARM},
    "bm25": lambda store, depth: _Lexical("bm25", "BM25 (bm25s)", store.lexical, depth),
    "bm25-rank": lambda store, depth: _Lexical("bm25-rank", "BM25 (rank-bm25)", rank_bm25_index(store), depth),
    "dense": lambda store, depth: _Dense("dense", "Dense MiniLM", store, depth),
    "hybrid": lambda store, depth: _Hybrid("hybrid", "Hybrid RRF (BM25 + MiniLM)", store, depth),
    "car-bm25-rank": _car(
        "car-bm25-rank", "car-rag, rank-bm25 anchors, k1=5 (paper's Two-Stage)", "bm25", 5, lexical=rank_bm25_index
    ),
    "car-bm25": _car("car-bm25", "car-rag, BM25 anchors, k1=5", "bm25", 5),
    "car-dense": _car("car-dense", "car-rag, dense anchors, k1=10", "dense", 10),
    "car-hybrid": _car("car-hybrid", "car-rag, hybrid RRF anchors, k1=10 (the default before latent scope)", "hybrid", 10),
    "car-timestamp": _car("car-timestamp", "car-rag anchor-only: later in scope voids (no RSSG)", "hybrid", 10, "timestamp"),
}
"""``car-default`` is the retriever as a user constructs it (``ControllingAuthorityRetriever(store)``,
what ``car-rag query`` runs without flags), and the two :data:`DO_NO_HARM` baselines are that
retriever with the CLI's flags; the other car-rag systems are paper-style two-stage variants. Every car-rag system resolves
authority with the RSSG (policy rules) except ``car-timestamp``,
the paper's anchor-only baseline (a later record in the same scope voids
an earlier one, whatever its type)."""

FRAMEWORK_SYSTEMS: dict[str, Callable[[CARStore, int], System]] = {
    "llamaindex-fusion": lambda store, depth: _Framework(
        "llamaindex-fusion", llamaindex_fusion_retriever(store, depth).retrieve, depth
    ),
    "langchain-ensemble": lambda store, depth: _Framework(
        "langchain-ensemble", langchain_ensemble_retriever(store, depth).invoke, depth
    ),
}
"""The LlamaIndex and LangChain hybrids; each imports its framework only when built."""

SYSTEMS.update(FRAMEWORK_SYSTEMS)


def build_system(name: str, store: CARStore, depth: int = 100) -> System:
    if name not in SYSTEMS:
        raise ValueError(f"unknown system {name!r}; choose from {sorted(SYSTEMS)}")
    return SYSTEMS[name](store, depth)


def embedding_system(base: str, name: str, label: str, store: CARStore, depth: int, embed: Callable[[str], Any]) -> System:
    """The ``dense`` or ``hybrid`` system with the query's vector made by ``embed`` (the
    ablation's query rewrite and HyDE); a hybrid's BM25 still reads the question itself."""
    kinds: dict[str, type[_Dense]] = {"dense": _Dense, "hybrid": _Hybrid}
    if base not in kinds:
        raise ValueError(f"no query vector to replace in system {base!r}; choose from {sorted(kinds)}")
    return kinds[base](name, label, store, depth, embed)
