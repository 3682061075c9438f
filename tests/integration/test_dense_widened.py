"""A date or filter answered from Chroma's unfiltered nearest records (``VectorChannel.search``
with ``share``): the same k nearest admitted records as Chroma's filtered search, on a real
collection, and the filtered search where the unfiltered ones hold too few."""

from __future__ import annotations

import chromadb
import numpy as np
import pytest

from car_rag.channels import DenseChannel
from car_rag.channels.dense import WIDEST

K = 5


@pytest.fixture
def shelved():
    """60 seeded vectors in a Chroma collection (its HNSW answers: ``exact_limit`` 0), each on
    shelf "a" or "b", and a query vector."""
    rng = np.random.default_rng(3)
    vectors = rng.standard_normal((60, 16)).astype(np.float32)
    ids = [f"r{i:02d}" for i in range(60)]
    shelf = {d: "a" if rng.random() < 0.5 else "b" for d in ids}
    client = chromadb.EphemeralClient()
    collection = client.create_collection(f"widened-{rng.integers(1 << 30)}", configuration={"hnsw": {"space": "cosine"}})
    collection.add(ids=ids, embeddings=vectors, metadatas=[{"shelf": shelf[d]} for d in ids])
    channel = DenseChannel(collection, exact_limit=0)
    yield channel, vectors, ids, shelf, rng.standard_normal(16).astype(np.float32)
    client.delete_collection(collection.name)


def nearest_admitted(vectors, ids, admitted, query, k):
    unit = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    scores = unit @ (query / np.linalg.norm(query))
    return [ids[i] for i in np.argsort(-scores) if ids[i] in admitted][:k]


def test_the_unfiltered_nearest_give_the_k_nearest_admitted_records(shelved):
    channel, vectors, ids, shelf, query = shelved
    admitted = {d for d, s in shelf.items() if s == "a"}
    seen: list[int] = []

    def readable(asked):
        seen.append(len(asked))
        return np.array([d in admitted for d in asked])

    hits = channel.search(query, K, where={"shelf": "a"}, readable=readable, share=len(admitted) / len(ids))
    assert [h.doc_id for h in hits] == nearest_admitted(vectors, ids, admitted, query, K)
    assert [h.doc_id for h in hits] == [h.doc_id for h in channel.search(query, K, where={"shelf": "a"})]
    assert [h.rank for h in hits] == list(range(1, K + 1))
    assert seen and seen[0] < len(ids)  # read from the unfiltered nearest, not all records


def test_a_share_that_overstates_what_is_admitted_ends_in_the_filtered_search(shelved):
    channel, vectors, ids, shelf, query = shelved
    far = nearest_admitted(vectors, ids, set(ids), query, len(ids))[-3:]  # the three farthest records
    for d in far:
        channel.collection.update(ids=[d], metadatas=[{"shelf": "far"}])
    asked: list[int] = []

    def readable(some):
        asked.append(len(some))
        return np.array([d in far for d in some])

    hits = channel.search(query, K, where={"shelf": "far"}, readable=readable, share=0.9)
    assert [h.doc_id for h in hits] == far  # every admitted record, nearest first
    assert max(asked) <= WIDEST * K  # never read deeper than WIDEST times k before the filtered search
