"""CARRetriever on LlamaIndex's in-memory default index (``VectorStoreIndex.from_documents``:
``SimpleVectorStore``, which keeps no text, with the nodes in the docstore), real MiniLM."""

from __future__ import annotations

import pytest
from llama_index.core import Document, VectorStoreIndex
from llama_index.core.vector_stores import SimpleVectorStore

from llama_index.retrievers.car import CAR_STATUS, CARRetriever, MetadataLayout

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


def test_a_vector_store_without_text_is_refused_with_what_to_pass(default_index, policy):
    with pytest.raises(TypeError, match=r"SimpleVectorStore.*keeps no text.*docstore"):
        CARRetriever(default_index.as_retriever(), default_index.vector_store, policy)
