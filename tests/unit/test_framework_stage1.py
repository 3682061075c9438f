"""``car_rag.adapters.FrameworkCorpus``: the core retriever over records a framework's store holds.

No model here: the dense search is a bag-of-words cosine over the record texts (a real
:class:`~car_rag.adapters.DenseSearch`, named as such), which either hands its vectors out (exact
search held in memory) or answers by itself, as a framework's store does."""

from __future__ import annotations

import re
import zlib
from collections.abc import Mapping, Sequence

import numpy as np
import pytest

from car_rag import CallerContext, Record, load_policy, load_records
from car_rag.adapters import FrameworkCorpus, MissingAuthorityMetadata, RecordLayout, StoreItem, group_records

DEMO = "car_rag/data/demo"
QUERY = "Is lodash still vulnerable to CVE-2099-10001?"
DIM = 256


def bag_of_words(text: str) -> np.ndarray:
    vector = np.zeros(DIM, dtype=np.float32)
    for word in re.findall(r"[a-z0-9]+", text.lower()):
        vector[zlib.crc32(word.encode()) % DIM] += 1.0
    return vector / max(float(np.linalg.norm(vector)), 1e-9)


class BagOfWordsDenseSearch:
    """A bag-of-words dense search over item texts; ``hands_out`` decides whether it gives its vectors."""

    def __init__(self, texts: Mapping[str, str], *, hands_out: bool = True):
        self.items = {i: bag_of_words(t) for i, t in texts.items()}
        self.hands_out = hands_out
        self.searches = 0

    def embed_query(self, query: str) -> Sequence[float]:
        return bag_of_words(query).tolist()

    def search(self, vector: Sequence[float], k: int) -> list[tuple[str, float]]:
        self.searches += 1
        query = np.asarray(vector, dtype=np.float32)
        scored = sorted(((float(v @ query), i) for i, v in self.items.items()), key=lambda s: (-s[0], s[1]))
        return [(i, s) for s, i in scored[:k]]

    def vectors(self, item_ids: Sequence[str]) -> Mapping[str, Sequence[float]] | None:
        return {i: self.items[i].tolist() for i in item_ids if i in self.items} if self.hands_out else None


@pytest.fixture(scope="module")
def policy():
    return load_policy(f"{DEMO}/policy.toml")


@pytest.fixture(scope="module")
def records() -> list[Record]:
    return load_records(f"{DEMO}/corpus.jsonl").records


def _ranking(corpus: FrameworkCorpus, query: str = QUERY, caller: CallerContext | None = None) -> list[tuple[str, str]]:
    return [(r.doc_id, r.status) for r in corpus.retriever().retrieve(query, caller)]


def test_held_vectors_and_the_stores_own_search_rank_alike(policy, records) -> None:
    texts = {r.doc_id: r.text for r in records}
    held = FrameworkCorpus(policy, records, BagOfWordsDenseSearch(texts))
    asked_search = BagOfWordsDenseSearch(texts, hands_out=False)
    asked = FrameworkCorpus(policy, records, asked_search)
    assert held.dense.items.exact and not asked.dense.items.exact
    for query in (QUERY, "Has the prototype pollution been fixed?", "zipcraft path traversal"):
        assert _ranking(held, query) == _ranking(asked, query), query
    assert asked_search.searches > 0
    ranked = dict(_ranking(held))
    assert ranked["sec-lodash-cve-2099-10001-disclosure"] == "superseded"


def test_added_and_removed_records_are_followed(policy, records) -> None:
    texts = {r.doc_id: r.text for r in records}
    dense = BagOfWordsDenseSearch(texts)
    release = "sec-lodash-4.17.12-release"
    corpus = FrameworkCorpus(policy, [r for r in records if r.doc_id != release], dense)
    assert dict(_ranking(corpus))["sec-lodash-cve-2099-10001-disclosure"] == "active"
    corpus.add([r for r in records if r.doc_id == release])
    assert dict(_ranking(corpus))["sec-lodash-cve-2099-10001-disclosure"] == "superseded"
    corpus.remove([release, "not-held"])
    ranking = dict(_ranking(corpus))
    assert release not in ranking and ranking["sec-lodash-cve-2099-10001-disclosure"] == "active"
    assert release not in corpus.lexical.doc_ids and release not in corpus.records
    assert len(corpus) == len(records) - 1


def test_the_dense_channel_reads_deeper_for_a_caller(policy, records) -> None:
    hidden = {r.doc_id for r in records[:30]}
    gated = [r.model_copy(update={"allowed_principals": ["insiders"]}) if r.doc_id in hidden else r for r in records]
    texts = {r.doc_id: r.text for r in gated}
    corpus = FrameworkCorpus(policy, gated, BagOfWordsDenseSearch(texts, hands_out=False))
    outsider = CallerContext(principals=["someone"])
    hits = corpus.dense.search(np.asarray(bag_of_words(QUERY)), 10, readable=lambda ids: outsider.mask(ids, corpus.records))
    assert len(hits) == 10 and not hidden & {h.doc_id for h in hits}
    assert [h.rank for h in hits] == list(range(1, 11))
    assert not hidden & {d for d, _ in _ranking(corpus, caller=outsider)}


def test_group_records_joins_chunks_and_refuses_items_without_metadata(policy, records) -> None:
    layout = RecordLayout(json_lists=False)
    record = records[0]
    meta = layout.metadata(record)
    items = [StoreItem("n1", meta, "first half."), StoreItem("n2", meta, "second half.")]
    got, owners = group_records(items, policy, layout, extraction="Add it with X")
    assert [r.doc_id for r in got] == [record.doc_id] and got[0].text == "first half.\n\nsecond half."
    assert owners == {"n1": record.doc_id, "n2": record.doc_id}
    with pytest.raises(MissingAuthorityMetadata, match="doc_type") as caught:
        group_records([*items, StoreItem("n3", {"source": "blog"}, "text")], policy, layout, extraction="Add it with X")
    assert "'n3'" in str(caught.value) and "Add it with X" in str(caught.value) and "car-rag extract" in str(caught.value)
