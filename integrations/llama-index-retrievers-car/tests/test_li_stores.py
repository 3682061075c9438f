"""CARRetriever on LlamaIndex's in-memory default index (``VectorStoreIndex.from_documents``:
``SimpleVectorStore``, which keeps no text, with the nodes in the docstore), real MiniLM; and
vector stores that cannot answer Stage 2's metadata lookups, refused with a clear error."""

from __future__ import annotations

import asyncio

import pytest
from llama_index.core import Document, VectorStoreIndex
from llama_index.core.vector_stores import SimpleVectorStore
from llama_index.core.vector_stores.types import BasePydanticVectorStore, VectorStoreQuery, VectorStoreQueryResult

from llama_index.postprocessor.car import SupersessionExpander
from llama_index.retrievers.car import CAR_STATUS, CARRetriever, MetadataLayout
from llama_index.retrievers.car.lookup import NodeAuthorityLookup, VectorStoreAuthorityLookup, authority_lookup

YAML_Q = "Can untrusted YAML with python object tags still execute code through yamlette load?"


@pytest.fixture(scope="module")
def default_index(records, embed_model) -> VectorStoreIndex:
    layout = MetadataLayout()
    documents = [Document(id_=r.doc_id, text=r.text, metadata=layout.metadata(r)) for r in records]
    return VectorStoreIndex.from_documents(documents, embed_model=embed_model)


def test_from_index_on_the_in_memory_default_works_on_the_first_query(default_index, policy):
    assert isinstance(default_index.vector_store, SimpleVectorStore) and not default_index.vector_store.stores_text
    nodes = CARRetriever.from_index(default_index, policy, similarity_top_k=3).retrieve(YAML_Q)
    meta = {n.node.metadata["doc_id"]: n.node.metadata for n in nodes}
    assert nodes[0].node.metadata["doc_id"] == "adv-yamlette-2.0.1-release"
    assert meta["adv-yamlette-disclosure"][CAR_STATUS] == "superseded"


def _statuses(nodes) -> list[tuple[str, str]]:
    return [(n.node.metadata["doc_id"], n.node.metadata[CAR_STATUS]) for n in nodes]


def test_the_in_memory_vector_store_beside_its_own_index_retriever_resolves_on_the_docstore(default_index, policy):
    """The README's first snippet, on the default index: its vector store keeps no text, so Stage 2
    looks records up in the docstore of the index the retriever searches, as from_index does."""
    retriever = CARRetriever(default_index.as_retriever(similarity_top_k=3), default_index.vector_store, policy)
    got = _statuses(retriever.retrieve(YAML_Q))
    assert got == _statuses(CARRetriever.from_index(default_index, policy, similarity_top_k=3).retrieve(YAML_Q))
    assert got[0] == ("adv-yamlette-2.0.1-release", "active") and ("adv-yamlette-disclosure", "superseded") in got


def test_an_index_stands_for_its_vector_store_or_its_docstore(default_index, index, policy):
    assert isinstance(authority_lookup(default_index), NodeAuthorityLookup)  # SimpleVectorStore keeps no text
    assert isinstance(authority_lookup(index), VectorStoreAuthorityLookup)  # Chroma does
    expander = SupersessionExpander(store=default_index, policy=policy)
    anchors = default_index.as_retriever(similarity_top_k=1).retrieve(YAML_Q)
    assert [n.node.metadata["doc_id"] for n in anchors] == ["adv-yamlette-disclosure"]
    expanded = [n.node.metadata["doc_id"] for n in expander.postprocess_nodes(anchors, query_str=YAML_Q)]
    assert "adv-yamlette-2.0.1-release" in expanded


def test_a_vector_store_without_text_beside_another_stage1_is_refused_with_what_to_pass(default_index, embed_model, policy):
    other = VectorStoreIndex.from_documents([Document(text="unrelated")], embed_model=embed_model)
    with pytest.raises(TypeError, match=r"SimpleVectorStore.*keeps no text.*store=index.*docstore"):
        CARRetriever(other.as_retriever(), default_index.vector_store, policy)


class _TextStoreWithoutLookups(BasePydanticVectorStore):
    """A vector store as many third-party ones are: it keeps text and answers similarity queries,
    but has no ``get_nodes`` (LlamaIndex's base class raises ``NotImplementedError``)."""

    stores_text: bool = True
    held: list = []

    @property
    def client(self) -> None:
        return None

    def add(self, nodes, **kwargs):
        self.held.extend(nodes)
        return [n.node_id for n in nodes]

    def delete(self, ref_doc_id, **delete_kwargs) -> None:
        self.held = [n for n in self.held if n.ref_doc_id != ref_doc_id]

    def query(self, query: VectorStoreQuery, **kwargs) -> VectorStoreQueryResult:
        top = self.held[: query.similarity_top_k]
        return VectorStoreQueryResult(nodes=top, similarities=[1.0] * len(top), ids=[n.node_id for n in top])


class _TextStoreWithoutFilters(_TextStoreWithoutLookups):
    """``get_nodes`` by id only: metadata filters are refused, as some stores do."""

    def get_nodes(self, node_ids=None, filters=None):
        if filters is not None:
            raise NotImplementedError("metadata filters are not supported")
        return [n for n in self.held if node_ids is None or n.node_id in node_ids]


def test_a_store_without_get_nodes_is_refused_naming_its_class_and_what_it_lacks(nodes, policy, embed_model):
    store = _TextStoreWithoutLookups()
    store.add(list(nodes))
    index = VectorStoreIndex.from_vector_store(store, embed_model=embed_model)
    with pytest.raises(
        TypeError,
        match=r"_TextStoreWithoutLookups cannot be filtered by metadata \(it does not implement "
        r"get_nodes\).*get_nodes\(filters=.*index\.docstore",
    ):
        CARRetriever(index.as_retriever(), store, policy)


def test_a_store_that_refuses_metadata_filters_is_a_clear_error_on_the_first_query(nodes, policy, embed_model):
    store = _TextStoreWithoutFilters()
    store.add(list(nodes))
    index = VectorStoreIndex.from_vector_store(store, embed_model=embed_model)
    retriever = CARRetriever(index.as_retriever(similarity_top_k=2), store, policy)
    with pytest.raises(
        TypeError,
        match=r"_TextStoreWithoutFilters cannot be filtered by metadata \(metadata filters are "
        r"not supported\)",
    ):
        retriever.retrieve(YAML_Q)
    with pytest.raises(TypeError, match=r"_TextStoreWithoutFilters cannot be filtered by metadata"):
        asyncio.run(retriever.aretrieve(YAML_Q))
