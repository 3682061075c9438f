"""CARAuthorityExtractor in a real IngestionPipeline: raw LlamaIndex Documents (no car-rag keys),
split by LlamaIndex's default splitter, typed and linked from their text, indexed with real
MiniLM, and resolved by CARRetriever.from_index; every chunk of a document carries its record."""

from __future__ import annotations

import pytest
from car_rag import load_policy
from llama_index.core import Document, VectorStoreIndex
from llama_index.core.extractors import BaseExtractor
from llama_index.core.ingestion import IngestionPipeline
from llama_index.core.node_parser import SentenceSplitter
from llama_index.core.schema import MetadataMode

from llama_index.retrievers.car import CAR_STATUS, CARAuthorityExtractor, CARAuthorityMetadataExtractor, CARRetriever

POLICY = """
name = "hr"
scope_keys = ["department"]
rules = []
[record_scope]
metadata_fields = {department = "department"}
[extract]
default_doc_type = "policy"
[[extract.identifiers]]
pattern = 'POL-(\\d+)'
doc_id = "pol-{1}"
[[extract.doc_types]]
doc_type = "memo"
title = '^memo\\b'
"""

FILLER = " ".join(f"Clause {i}: receipts are kept for seven years and submitted within thirty days." for i in range(150))
DOCUMENTS = [
    Document(
        id_="pol-7",
        text=f"POL-7. Staff fly economy class on every business trip. {FILLER}",
        metadata={"title": "Travel Policy", "department": "finance"},
    ),
    Document(
        id_="pol-12",
        text=f"POL-12. This policy replaces POL-7. Staff may fly business class on flights over six hours. {FILLER}",
        metadata={"title": "Travel and Expenses Policy", "department": "finance"},
    ),
    Document(
        id_="memo-3",
        text="Book every flight through the travel portal; the class you may fly is set by POL-12.",
        metadata={"title": "Memo: booking flights", "department": "finance"},
    ),
]


@pytest.fixture
def policy(tmp_path):
    path = tmp_path / "hr.toml"
    path.write_text(POLICY, encoding="utf-8")
    return load_policy(path)


@pytest.mark.parametrize("component", [CARAuthorityExtractor, CARAuthorityMetadataExtractor])
def test_a_pipeline_gives_an_index_car_rag_resolves_on(policy, embed_model, component):
    pipeline = IngestionPipeline(transformations=[SentenceSplitter(), component(policy=policy)])
    nodes = pipeline.run(documents=DOCUMENTS)
    by_doc: dict[str, list] = {}
    for node in nodes:
        by_doc.setdefault(node.metadata["doc_id"], []).append(node)
    assert len(by_doc["pol-12"]) > 1  # split into chunks, each carrying its document's record
    assert {n.metadata["doc_type"] for n in by_doc["pol-12"]} == {"policy"}
    assert {n.metadata["department"] for n in nodes} == {"finance"}
    assert by_doc["memo-3"][0].metadata["doc_type"] == "memo"
    assert all("pol-7" in n.metadata["supersedes"] for n in by_doc["pol-12"])
    index = VectorStoreIndex(nodes, embed_model=embed_model)
    retriever = CARRetriever.from_index(index, policy, similarity_top_k=3)
    found = retriever.retrieve("Which class do staff fly on a business trip?")
    statuses = {n.node.metadata["doc_id"]: n.node.metadata[CAR_STATUS] for n in found}
    assert statuses.get("pol-7") == "superseded" and statuses.get("pol-12") == "active"


@pytest.mark.parametrize("component", [CARAuthorityExtractor, CARAuthorityMetadataExtractor])
def test_a_document_it_cannot_read_is_named(policy, component):
    with pytest.raises(ValueError, match="record 'blank' field 'text'"):
        component(policy=policy)([*SentenceSplitter().get_nodes_from_documents(DOCUMENTS[:1]), _blank()])


def test_the_metadata_extractor_returns_one_dict_per_node_and_keeps_them_out_of_the_embedded_text(policy):
    extractor = CARAuthorityMetadataExtractor(policy=policy, in_place=False)
    nodes = SentenceSplitter().get_nodes_from_documents(DOCUMENTS)
    before = [(n.metadata.copy(), n.get_content(MetadataMode.EMBED)) for n in nodes]
    metas = extractor.extract(nodes)
    assert isinstance(extractor, BaseExtractor) and len(metas) == len(nodes)
    assert {m["doc_id"] for m in metas} == {"pol-7", "pol-12", "memo-3"}
    assert all(("pol-7" in m.get("supersedes", "")) == (m["doc_id"] == "pol-12") for m in metas)
    done = extractor.process_nodes(nodes)
    assert [(n.metadata, n.get_content(MetadataMode.EMBED)) for n in nodes] == before  # in_place=False: untouched
    assert [n.metadata["doc_id"] for n in done] == [m["doc_id"] for m in metas]
    for node in done:
        embedded = node.get_content(MetadataMode.EMBED)
        assert embedded.endswith(node.get_content(MetadataMode.NONE)) and "Excerpt" not in embedded  # no template rewrite
        assert not any(key in embedded for key in ("doc_id", "doc_type", "supersedes", "car_"))
        assert "supersedes" not in node.get_content(MetadataMode.LLM)


def _blank():
    from llama_index.core.schema import TextNode

    return TextNode(id_="blank", text="   ")
