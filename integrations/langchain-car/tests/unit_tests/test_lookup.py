"""Stage-2 lookups: the Chroma ``where`` subset, evaluated in memory, and the adapters."""

from __future__ import annotations

import pytest
from langchain_core.documents import Document

from langchain_car import ChromaLookup, DocumentListLookup
from langchain_car.lookup import as_lookup, matches_where

META = {"package": "lodash", "cve_id": "CVE-1", "doc_type": "patch_release", "supersedes": ["a", "b"]}


@pytest.mark.parametrize(
    ("where", "expected"),
    [
        ({"package": "lodash"}, True),
        ({"package": "other"}, False),
        ({"package": {"$eq": "lodash"}}, True),
        ({"package": {"$ne": "lodash"}}, False),
        ({"doc_type": {"$in": ["patch_release", "x"]}}, True),
        ({"doc_type": {"$nin": ["patch_release"]}}, False),
        ({"supersedes": {"$contains": "a"}}, True),
        ({"supersedes": {"$contains": "z"}}, False),
        ({"package": {"$contains": "lodash"}}, False),  # $contains reads list metadata only
        ({"missing": "x"}, False),
        ({"missing": {"$ne": "x"}}, True),
        ({"$and": [{"package": "lodash"}, {"cve_id": "CVE-1"}]}, True),
        ({"$and": [{"package": "lodash"}, {"cve_id": "CVE-2"}]}, False),
        ({"$or": [{"package": "x"}, {"supersedes": {"$contains": "b"}}]}, True),
        ({"$or": [{"package": "x"}, {"cve_id": "y"}]}, False),
    ],
)
def test_matches_where(where, expected) -> None:
    assert matches_where(META, where) is expected


def test_unknown_operators_raise() -> None:
    with pytest.raises(ValueError, match=r"\$regex"):
        matches_where(META, {"package": {"$regex": "lo"}})
    with pytest.raises(ValueError, match=r"\$nor"):
        matches_where(META, {"$nor": []})


def test_as_lookup_dispatch() -> None:
    docs = [Document(id="1", page_content="a", metadata=META)]
    assert isinstance(as_lookup(docs), DocumentListLookup)
    lookup = DocumentListLookup(docs)
    assert as_lookup(lookup) is lookup

    class FakeChroma:
        def get(self, where, include):
            assert include == ["documents", "metadatas"]
            return {"ids": ["1"], "documents": ["a"], "metadatas": [META]}

    chroma = as_lookup(FakeChroma())
    assert isinstance(chroma, ChromaLookup)
    assert chroma.get({"package": "lodash"}) == [Document(id="1", page_content="a", metadata=META)]
    with pytest.raises(TypeError, match="get"):
        ChromaLookup(object())


async def test_aget_runs_the_sync_lookup() -> None:
    lookup = DocumentListLookup([Document(id="1", page_content="a", metadata=META)])
    assert await lookup.aget({"package": "lodash"}) == lookup.get({"package": "lodash"})
