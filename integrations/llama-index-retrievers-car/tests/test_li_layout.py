"""Records <-> nodes: car-rag's metadata layout survives LlamaIndex and Chroma."""

from __future__ import annotations

import json

import pytest
from car_rag import Record
from car_rag.lookup import ScopeQuery, minimal_queries
from llama_index.core.schema import MetadataMode, TextNode

from llama_index.retrievers.car import MetadataLayout, node_to_record, record_to_node, records_to_nodes


def test_round_trip_every_field(policy):
    record = Record.model_validate(
        dict(
            doc_id="r-1",
            text="Release 9.9.9. Hardened input handling.",
            doc_type="patch_release",
            scope={"package": "pkg", "cve_id": "CVE-2099-1"},
            published_at="2024-01-02T03:04:05+00:00",
            effective_at="2024-01-05",
            version="9.9.9",
            source="notes",
            uri="https://example.invalid/r-1",
            authority=0.5,
            tenant="acme",
            allowed_principals=["a", "b"],
            supersedes=["r-0"],
            metadata={"section": "2.1", "page": 3},
        )
    )
    node = record_to_node(record)
    assert node.node_id == "r-1" and node.ref_doc_id == "r-1"
    assert node.metadata["package"] == "pkg" and node.metadata["doc_type"] == "patch_release"
    assert json.loads(node.metadata["supersedes"]) == ["r-0"]
    assert node.get_content(metadata_mode=MetadataMode.EMBED) == record.text
    assert "tenant" not in node.get_content(metadata_mode=MetadataMode.LLM)
    assert node_to_record(node, policy) == record


def test_round_trip_through_a_real_chroma_vector_store(index, records, policy):
    stored = index.vector_store.get_nodes(node_ids=[r.doc_id for r in records])
    assert len(stored) == len(records)
    back = {n.node_id: node_to_record(n, policy) for n in stored}
    for record in records:
        assert back[record.doc_id] == record


def test_list_layout_and_custom_keys(policy):
    layout = MetadataLayout(doc_id_key="record_id", doc_type_key="kind", json_lists=False)
    record = Record(doc_id="x", text="t", doc_type="vulnerability_disclosure", supersedes=["y"])
    node = record_to_node(record, layout)
    assert node.metadata["record_id"] == "x" and node.metadata["kind"] == "vulnerability_disclosure"
    assert node.metadata["supersedes"] == ["y"]
    assert node_to_record(node, policy, layout) == record


def test_node_without_doc_type_or_with_bad_metadata_is_rejected(policy):
    with pytest.raises(ValueError, match="doc_type"):
        node_to_record(TextNode(text="x"), policy)
    bad = TextNode(text="x", id_="n", metadata={"doc_type": "patch_release", "published_at": "not a date"})
    with pytest.raises(ValueError, match="not a valid car-rag record"):
        node_to_record(bad, policy)


def test_doc_id_falls_back_to_ref_doc_then_node_id(policy):
    node = TextNode(text="x", id_="node-7", metadata={"doc_type": "patch_release"})
    assert node_to_record(node, policy).doc_id == "node-7"


def test_records_to_nodes_accepts_dicts(records):
    dumped = [r.model_dump(mode="json") for r in records]
    assert [n.node_id for n in records_to_nodes(dumped)] == [r.doc_id for r in records]


def test_scope_queries_collapse():
    bucket = ScopeQuery.make({"package": "p", "cve_id": "c"})
    typed = ScopeQuery.make({"package": "p", "cve_id": "c"}, ["patch_release"])
    broad = ScopeQuery.make({"package": "p"}, ["patch_release"])
    assert minimal_queries([bucket, typed]) == [bucket]
    assert set(minimal_queries([typed, broad])) == {broad}
    with pytest.raises(ValueError):
        ScopeQuery.make({})
