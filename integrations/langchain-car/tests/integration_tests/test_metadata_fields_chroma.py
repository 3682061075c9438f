"""Stage 2 over real Chroma (langchain-chroma, embedded, real MiniLM) for documents that keep
their own metadata names: the ``where`` filters use the names the policy maps."""

from __future__ import annotations

from langchain_car import CARRetriever
from tests.integration_tests import stores
from tests.unit_tests.test_metadata_fields import DOCS, policy, statuses
from tests.unit_tests.test_retriever import KeywordRetriever


def test_chroma_lookups_find_the_fix_under_the_mapped_names(tmp_path) -> None:
    chroma = stores.new_chroma(DOCS, prefix="mapped")
    stage1 = KeywordRetriever(documents=DOCS, k=1)
    assert statuses(CARRetriever(base_retriever=stage1, store=chroma, policy=policy(tmp_path, True))) == [
        ("release", "active"),
        ("disclosure", "superseded"),
    ]
    assert statuses(CARRetriever(base_retriever=stage1, store=chroma, policy=policy(tmp_path, False))) == [
        ("disclosure", "active"),
    ]
