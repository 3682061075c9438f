"""The eligibility gate means the same thing in every channel.

``CallerContext.can_read`` (Stage-2 admission), ``CallerContext.mask`` (the BM25 weight
mask) and ``CallerContext.chroma_where`` (the dense channel's pre-filter, run here through
a real embedded Chroma collection holding the store's own metadata) must admit exactly the
same records, for any records and any caller. Names are drawn from look-alikes (case,
white space, combining accents, SQL wildcards, the reserved ``*``) and from arbitrary text.
"""

from __future__ import annotations

import chromadb
import numpy as np
import pytest
from chromadb.config import Settings
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from car_rag import CallerContext
from car_rag.channels import DenseChannel
from car_rag.records import PUBLIC_TENANT, Record
from car_rag.store import chroma_metadata

LOOKALIKES = ["acme", "Acme", "acme ", " acme", "globex", PUBLIC_TENANT, "%", "_", "a", "ab", "a%", "é", "e\u0301",
              "a,b", '"', "\\", "null", "0", "x\x00y", '["a"]']  # fmt: skip
names = st.one_of(st.sampled_from(LOOKALIKES), st.text(min_size=1, max_size=4))
callers = st.builds(CallerContext, st.none() | names, st.frozensets(names, max_size=3))


@st.composite
def corpora(draw: st.DrawFn) -> list[Record]:
    """1-12 records with random governance; drafts the validation rejects are left out."""
    records = []
    for i in range(draw(st.integers(1, 12))):
        tenant = draw(st.none() | names)
        principals = draw(st.lists(names, max_size=3))
        try:
            records.append(Record(doc_id=f"d{i}", text="t", doc_type="note", tenant=tenant, allowed_principals=principals))
        except ValidationError:
            continue
    return records


@pytest.fixture(scope="module")
def collection(tmp_path_factory: pytest.TempPathFactory):
    """One embedded Chroma collection; each example adds its records and removes them after."""
    client = chromadb.PersistentClient(path=str(tmp_path_factory.mktemp("chroma")), settings=Settings(anonymized_telemetry=False))
    return client.create_collection("eligibility", embedding_function=None)


@settings(max_examples=100, deadline=None)
@given(records=corpora(), readers=st.lists(callers, min_size=1, max_size=5))
def test_can_read_mask_and_chroma_where_admit_the_same_records(collection, records, readers) -> None:
    ids = [r.doc_id for r in records]
    vectors = np.random.default_rng(len(records)).normal(size=(len(records), 8)).astype(np.float32)
    if records:
        collection.add(ids=ids, embeddings=vectors, documents=[r.text for r in records],
                       metadatas=[chroma_metadata(r) for r in records])  # fmt: skip
    try:
        by_id = {r.doc_id: r for r in records}
        dense = DenseChannel(collection)
        for caller in readers:
            readable = {r.doc_id for r in records if caller.can_read(r)}
            masked = {d for d, keep in zip(ids, caller.mask(ids, by_id)) if keep}
            where = caller.chroma_where()
            filtered = set(collection.get(where=where, include=[])["ids"])
            searched = {hit.doc_id for hit in dense.search(np.ones(8, dtype=np.float32), len(records), where=where)}
            assert masked == readable, caller
            assert filtered == readable, (caller, where)
            assert searched == readable, (caller, where)
    finally:
        if ids:
            collection.delete(ids=ids)
