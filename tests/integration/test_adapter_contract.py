"""The two framework adapters keep one contract: the same arguments with the same defaults, and
on the same records given the same Stage-1 anchors, the same records in the same order, the same
set of ``car_*`` metadata keys and the same statuses, superseders, rules and roles (Stage 2 on
each framework's in-memory store; no model)."""

from __future__ import annotations

import inspect
import json
from pathlib import Path
from typing import Any

import pytest

import car_rag
from car_rag import load_policy, load_records

pytest.importorskip("llama_index.retrievers.car", reason="llama-index-retrievers-car is not installed")
pytest.importorskip("langchain_car", reason="langchain-car is not installed")

import langchain_car  # noqa: E402
import llama_index.retrievers.car as li_car  # noqa: E402
from langchain_core.callbacks import CallbackManagerForRetrieverRun  # noqa: E402
from langchain_core.documents import Document  # noqa: E402
from langchain_core.retrievers import BaseRetriever as LCRetriever  # noqa: E402
from llama_index.core.retrievers import BaseRetriever as LIRetriever  # noqa: E402
from llama_index.core.schema import NodeWithScore, QueryBundle  # noqa: E402

DEMO = Path(car_rag.__file__).resolve().parent / "data" / "demo"
SHARED = {"store": None, "policy": None, "k": 5, "k1": None, "caller": None, "scope_lookup_limit": 20}
"""The arguments both CARRetrievers take, with their defaults (None: required or unset)."""


class FixedLC(LCRetriever):
    """A LangChain Stage 1 returning given documents (a real retriever, not a mock)."""

    docs: list[Document]

    def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun) -> list[Document]:
        return self.docs


class FixedLI(LIRetriever):
    """A LlamaIndex Stage 1 returning given nodes."""

    def __init__(self, nodes: list[NodeWithScore]) -> None:
        super().__init__()
        self.nodes = nodes

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return self.nodes


def _li_defaults() -> dict[str, Any]:
    params = inspect.signature(li_car.CARRetriever.__init__).parameters
    return {n: (None if p.default is inspect.Parameter.empty else p.default) for n, p in params.items()}


def test_the_same_arguments_with_the_same_defaults() -> None:
    li = _li_defaults()
    lc = {n: (None if f.is_required() else f.default) for n, f in langchain_car.CARRetriever.model_fields.items()}
    for name, default in SHARED.items():
        assert name in li and name in lc, f"{name}: LlamaIndex {name in li}, LangChain {name in lc}"
        assert li[name] == lc[name] == default, f"{name}: LlamaIndex {li[name]!r}, LangChain {lc[name]!r}"
    assert "doc_id_key" in li and lc["doc_id_key"] == "doc_id" == li_car.MetadataLayout().doc_id_key


COMPARED = (
    "car_status",
    "car_superseded_by",
    "car_voided_by",
    "car_voids",
    "car_rule",
    "car_role",
    "car_rank",
    "car_anchor_id",
    "car_hidden_superseder",
    "car_policy",
)
"""The annotations whose values must agree (the rest, e.g. car_stage1_channel, name framework classes)."""


def _view(doc_id: str | None, metadata: dict[str, Any]) -> tuple[str | None, frozenset[str], list[Any]]:
    """A returned item as the contract sees it: its id, its set of car_* keys, the compared values."""
    return doc_id, frozenset(k for k in metadata if k.startswith("car_")), [metadata[k] for k in COMPARED]


def test_same_records_statuses_and_car_keys_given_the_same_anchors() -> None:
    policy = load_policy(DEMO / "policy.toml")
    records = load_records(DEMO / "corpus.jsonl").records
    queries = [json.loads(line) for line in (DEMO / "queries.jsonl").read_text().splitlines() if line.strip()]
    docs = {d.id: d for d in langchain_car.records_to_documents(records)}
    nodes = {n.node_id: n for n in li_car.records_to_nodes(records)}
    compared = 0
    for q in queries:
        anchors = q["anchor_doc_ids"]
        lc = langchain_car.CARRetriever(
            base_retriever=FixedLC(docs=[docs[a] for a in anchors]), store=list(docs.values()), policy=policy, k=10
        ).invoke(q["query"])
        li = li_car.CARRetriever(
            FixedLI([NodeWithScore(node=nodes[a], score=1.0) for a in anchors]), list(nodes.values()), policy, k=10
        ).retrieve(q["query"])
        lc_view = [_view(d.id, d.metadata) for d in lc]
        li_view = [_view(n.node.node_id, n.node.metadata) for n in li]
        assert lc_view == li_view, q["query_id"]
        compared += len(lc_view)
    assert compared > len(queries)  # superseders were brought in, not only the anchors compared
