"""CARRetriever on LlamaIndex's ``PGVectorStore``: a real PostgreSQL + pgvector (started by the
``pg_database`` fixture), node metadata in its JSONB column, the real MiniLM. Stage 2 is the
store's own ``get_nodes(filters=MetadataFilters(...))``; on the packaged demo corpus it gives
the core's records and statuses given the same anchors."""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path

import car_rag
import pytest
from car_rag import CARStore, ControllingAuthorityRetriever, Record, load_policy, load_records
from llama_index.core import StorageContext, VectorStoreIndex
from llama_index.core.schema import NodeWithScore, TextNode
from llama_index.vector_stores.postgres import PGVectorStore

from llama_index.retrievers.car import CAR_STATUS, CAR_SUPERSEDED_BY, CARRetriever, MetadataLayout, records_to_nodes

DEMO = Path(car_rag.__file__).resolve().parent / "data" / "demo"
NATIVE = MetadataLayout(json_lists=False)
"""Lists (``supersedes``) as JSONB arrays, which PGVectorStore's ``contains`` filter matches."""
YAML_Q = "Can untrusted YAML with python object tags still execute code through yamlette load?"


def pg_index(uri: str, nodes: list, embed_model, table: str) -> VectorStoreIndex:
    store = PGVectorStore.from_params(connection_string=uri, async_connection_string=uri, table_name=table, embed_dim=384)
    return VectorStoreIndex(nodes, storage_context=StorageContext.from_defaults(vector_store=store), embed_model=embed_model)


def ids(nodes: list[NodeWithScore]) -> list[str]:
    return [n.node.metadata.get("doc_id") or n.node.node_id for n in nodes]


@pytest.fixture(scope="module")
def demo():
    report = load_records(DEMO / "corpus.jsonl")
    assert report.errors == []
    return load_policy(DEMO / "policy.toml"), report.records


@pytest.fixture(scope="module")
def demo_index(pg_database, demo, embed_model) -> VectorStoreIndex:
    return pg_index(pg_database(), records_to_nodes(demo[1], NATIVE), embed_model, "demo")


@pytest.fixture(scope="module")
def demo_core(tmp_path_factory, demo, embedder):
    store = CARStore.open(tmp_path_factory.mktemp("core-demo"), demo[0], embedder=embedder)
    assert store.ingest(demo[1], progress=False).errors == []
    yield store
    store.close()


@pytest.fixture(scope="module")
def queries() -> list[dict]:
    return [json.loads(line) for line in (DEMO / "queries.jsonl").read_text().splitlines() if line.strip()]


def test_same_records_and_statuses_as_the_core_given_the_same_anchors(demo_index, demo_core, demo, queries):
    """The core's dense anchors handed to Stage 2 on PGVectorStore: its records, its statuses."""
    policy = demo[0]
    core = ControllingAuthorityRetriever(demo_core, anchors="dense", k1=10, fusion="rrf", latent_scope=False)
    wrapped = CARRetriever(demo_index.as_retriever(similarity_top_k=10), demo_index.vector_store, policy, layout=NATIVE)
    by_id = {n.node_id: n for n in records_to_nodes(demo[1], NATIVE)}
    for q in queries:
        expected = core.retrieve(q["query"])
        stage1 = [NodeWithScore(node=by_id[h.doc_id], score=h.score) for h in expected.anchors]
        got = wrapped.resolve(q["query"], stage1).nodes
        assert ids(got) == expected.doc_ids(), q["query_id"]
        assert [n.node.metadata[CAR_STATUS] for n in got] == [r.status for r in expected], q["query_id"]
        assert [n.node.metadata[CAR_SUPERSEDED_BY] for n in got] == [r.superseded_by for r in expected], q["query_id"]


def test_dense_stage1_on_pgvector_gives_the_core_top5(demo_index, demo_core, demo, queries):
    """PGVectorStore's exact (unindexed) cosine search as Stage 1 vs the core's exact dense channel."""
    core = ControllingAuthorityRetriever(demo_core, anchors="dense", k1=10, fusion="rrf", latent_scope=False)
    wrapped = CARRetriever(demo_index.as_retriever(similarity_top_k=10), demo_index.vector_store, demo[0], layout=NATIVE)
    for q in queries:
        expected = core.retrieve(q["query"])
        got = wrapped.retrieve(q["query"])
        assert ids(got) == expected.doc_ids(5), q["query_id"]
        assert [n.node.metadata[CAR_STATUS] for n in got] == [r.status for r in expected.top(5)], q["query_id"]
        assert ids(asyncio.run(wrapped.aretrieve(q["query"]))) == ids(got), q["query_id"]


def _bulletin() -> Record:
    return Record.model_validate(
        dict(
            doc_id="vendor-bulletin",
            text="Vendor bulletin 12.",
            doc_type="vendor_bulletin",
            scope={"package": "elsewhere"},
            published_at="2030-01-01",
            supersedes=["adv-yamlette-disclosure"],
        )
    )


def test_explicit_edge_from_another_scope_is_found_on_jsonb_lists(pg_database, records, policy, embed_model):
    index = pg_index(pg_database(), records_to_nodes([*records, _bulletin()], NATIVE), embed_model, "edge")
    nodes = records_to_nodes(records, NATIVE)
    anchor = [NodeWithScore(node=n, score=1.0) for n in nodes if n.node_id == "adv-yamlette-disclosure"]
    got = CARRetriever(index.as_retriever(), index.vector_store, policy, layout=NATIVE).resolve(YAML_Q, anchor).nodes
    meta = {n.node.metadata["doc_id"]: n.node.metadata for n in got}
    assert "vendor-bulletin" in meta["adv-yamlette-disclosure"][CAR_SUPERSEDED_BY]


def test_json_string_lists_find_explicit_edges_within_a_scope_only(pg_database, records, policy, embed_model):
    """The default layout (lists as JSON strings) on PGVectorStore: the documented gap, as on Chroma."""
    index = pg_index(pg_database(), records_to_nodes([*records, _bulletin()]), embed_model, "edge_json")
    anchor = [NodeWithScore(node=n, score=1.0) for n in records_to_nodes(records) if n.node_id == "adv-yamlette-disclosure"]
    got = CARRetriever(index.as_retriever(), index.vector_store, policy).resolve(YAML_Q, anchor).nodes
    meta = {n.node.metadata["doc_id"]: n.node.metadata for n in got}
    assert "vendor-bulletin" not in meta
    assert meta["adv-yamlette-disclosure"][CAR_SUPERSEDED_BY] == ["adv-yamlette-2.0.1-release"]


def test_a_table_without_car_rag_keys_is_passed_through_unresolved(pg_database, embed_model, policy):
    plain = [
        TextNode(id_=f"plain-{i}", text=t, metadata={"source": "wiki", "package": "yamlette"})
        for i, t in enumerate(["yamlette load executes python object tags", "yamlette 2 notes", "unrelated"])
    ]
    index = pg_index(pg_database(), plain, embed_model, "plain")
    got = CARRetriever(index.as_retriever(similarity_top_k=3), index.vector_store, policy).retrieve(YAML_Q)
    assert len(got) == 3 and {n.node.metadata[CAR_STATUS] for n in got} == {"unresolved"}


def test_foreign_rows_found_by_stage2_are_skipped_with_a_warning(pg_database, records, embed_model, policy):
    anchor_record = next(r for r in records if r.doc_id == "adv-yamlette-disclosure")
    foreign = TextNode(id_="foreign", text="yamlette 9 notes", metadata=dict(anchor_record.scope))
    index = pg_index(pg_database(), [*records_to_nodes(records, NATIVE), foreign], embed_model, "foreign")
    anchor = [NodeWithScore(node=n, score=1.0) for n in records_to_nodes([anchor_record], NATIVE)]
    with pytest.warns(UserWarning, match=r"unusable document: record 'foreign' has no 'doc_type'"):
        got = CARRetriever(index.as_retriever(), index.vector_store, policy, layout=NATIVE).resolve(YAML_Q, anchor).nodes
    assert "foreign" not in ids(got) and ids(got)[0] == "adv-yamlette-2.0.1-release"


def test_numeric_looking_scope_values_are_compared_as_text(pg_database, embed_model, policy, caplog):
    """PGVectorStore casts the column to float for an ``==`` whose value parses as a number; car-rag
    sends scope values as ``in [...]`` (text), so "2024" never meets "2024.0" nor fails on "abc"."""
    rows = [
        Record.model_validate(
            dict(
                doc_id="d-2024",
                text="Disclosure.",
                doc_type="vulnerability_disclosure",
                scope={"package": "2024", "cve_id": "CVE-1"},
                published_at="2024-01-01",
            )
        ),
        Record.model_validate(
            dict(
                doc_id="r-2024",
                text="Release.",
                doc_type="patch_release",
                scope={"package": "2024", "cve_id": "CVE-1"},
                published_at="2024-02-01",
                version="1.0",
            )
        ),
        Record.model_validate(
            dict(
                doc_id="r-float",
                text="Release.",
                doc_type="patch_release",
                scope={"package": "2024.0", "cve_id": "CVE-1"},
                published_at="2024-03-01",
                version="1.1",
            )
        ),
        Record.model_validate(
            dict(
                doc_id="r-text",
                text="Release.",
                doc_type="patch_release",
                scope={"package": "abc", "cve_id": "CVE-1"},
                published_at="2024-03-01",
                version="1.1",
            )
        ),
    ]
    index = pg_index(pg_database(), records_to_nodes(rows, NATIVE), embed_model, "numeric")
    anchor = [NodeWithScore(node=records_to_nodes(rows[:1], NATIVE)[0], score=1.0)]
    with caplog.at_level(logging.WARNING):
        got = CARRetriever(index.as_retriever(), index.vector_store, policy, layout=NATIVE).resolve("is it fixed?", anchor).nodes
    assert ids(got) == ["r-2024", "d-2024"]
