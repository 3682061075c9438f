"""The metadata layout: records → Documents → records, and documents written by others."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from car_rag import Record, load_policy
from langchain_core.documents import Document

from langchain_car import document_metadata, document_to_record, load_documents, record_to_document, records_to_documents
from tests.corpus import RECORDS, records

POLICY = load_policy("security-advisory")


def _full_record() -> Record:
    return Record(
        doc_id="rel-1",
        text="Release 1.0.1 fixes the parser.",
        doc_type="patch_release",
        scope={"package": "p", "cve_id": "CVE-2099-1"},
        published_at=datetime(2024, 1, 2, tzinfo=UTC),
        effective_at=datetime(2024, 1, 5, 12, tzinfo=UTC),
        version="1.0.1",
        source="notes",
        uri="https://example.invalid/1.0.1",
        authority=0.5,
        tenant="acme",
        allowed_principals=["sec-team", "ops"],
        supersedes=["rel-0"],
        metadata={"section": "3.1", "page": 7, "tags": ["a", "b"]},
    )


def test_round_trip_keeps_every_field() -> None:
    record = _full_record()
    doc = record_to_document(record)
    assert doc.id == "rel-1" and doc.page_content == record.text
    assert document_to_record(doc) == record


@pytest.mark.parametrize("record", records(), ids=lambda r: r.doc_id)
def test_round_trip_corpus(record: Record) -> None:
    assert document_to_record(record_to_document(record), POLICY) == record


def test_layout_is_flat_chroma_metadata() -> None:
    meta = document_metadata(_full_record())
    for key, value in meta.items():
        assert isinstance(value, (str, int, float, bool)) or (isinstance(value, list) and value), key
    assert meta["package"] == "p" and meta["cve_id"] == "CVE-2099-1"  # scope keys are flat, filterable
    assert meta["supersedes"] == ["rel-0"]  # list metadata: Stage 2 asks {"$contains": id}
    assert meta["car_tenant"] == "acme" and meta["car_public"] is False
    assert json.loads(meta["car_metadata_json"]) == {"page": 7, "section": "3.1", "tags": ["a", "b"]}


def test_empty_lists_are_left_out() -> None:
    meta = document_metadata(Record(doc_id="d", text="t", doc_type="x"))
    assert "supersedes" not in meta and "allowed_principals" not in meta and "car_scope_keys" not in meta


def test_scope_key_colliding_with_the_layout_is_rejected() -> None:
    with pytest.raises(ValueError, match="collide"):
        document_metadata(Record(doc_id="d", text="t", doc_type="x", scope={"uri": "u"}))


def test_documents_written_by_others_use_the_policy_scope_keys() -> None:
    doc = Document(
        id="chroma-id-7",
        page_content="Fixed in 2.0.",
        metadata={
            "doc_type": "patch_release",
            "package": "p",
            "cve_id": "CVE-2099-9",
            "published_at": "2024-02-01",
            "supersedes": '["adv-1"]',  # a JSON string, as stores without list metadata keep it
            "team": "platform",
        },
    )
    record = document_to_record(doc, POLICY)
    assert record.doc_id == "chroma-id-7"
    assert record.scope == {"package": "p", "cve_id": "CVE-2099-9"}
    assert record.supersedes == ["adv-1"]
    assert record.metadata == {"team": "platform"}


def test_missing_doc_type_is_an_error_naming_the_document() -> None:
    with pytest.raises(ValueError, match="'d1' has no 'doc_type'"):
        document_to_record(Document(id="d1", page_content="x", metadata={}))


def test_invalid_metadata_is_an_error_naming_the_field() -> None:
    doc = Document(id="d1", page_content="x", metadata={"doc_type": "t", "authority": 3.0})
    with pytest.raises(ValueError, match="authority"):
        document_to_record(doc)


def test_records_to_documents_accepts_dicts() -> None:
    docs = records_to_documents(RECORDS)
    assert [d.id for d in docs] == [r["doc_id"] for r in RECORDS]
    with pytest.raises(ValueError, match="supercedes"):
        records_to_documents([{**RECORDS[0], "supercedes": ["x"]}])


def test_load_documents(tmp_path) -> None:
    path = tmp_path / "corpus.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in RECORDS[:2]) + "\n{not json}\n", encoding="utf-8")
    with pytest.raises(ValueError, match="1 invalid records"):
        load_documents(path)
    with pytest.warns(UserWarning, match="invalid JSON"):
        docs = load_documents(path, strict=False)
    assert [d.id for d in docs] == [RECORDS[0]["doc_id"], RECORDS[1]["doc_id"]]
