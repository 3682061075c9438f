"""Memory-mapped BM25 (car_rag.channels.mapped_bm25) scores as the heap index of its backend does."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from car_rag.channels import make_lexical_index
from car_rag.channels.incremental_bm25 import IncrementalBM25Index
from car_rag.channels.mapped_bm25 import MappedIncrementalBM25Index, new_mapped, open_mapped
from car_rag.mapped_files import StringColumn

IDS = [f"r{i}" for i in range(6)]
TEXTS = [
    "lodash trim ReDoS fixed in 4.17.21",
    "lodash prototype pollution in merge",
    "openssl heartbleed advisory",
    "openssl patch release for heartbleed, supersedes the advisory",
    "",
    "trim whitespace ReDoS in another library",
]
QUERIES = ["lodash ReDoS", "heartbleed patch", "trim", "unknown-word", "the"]
BACKENDS = ["bm25s", "bm25-incremental"]


def held(index: object) -> list[np.ndarray]:
    """The large arrays a backend scores from."""
    if hasattr(index, "_bm25"):
        return [index._bm25.scores["data"], index._tokens]  # type: ignore[attr-defined]
    return [index._docs, index._tf]  # type: ignore[attr-defined]


@pytest.mark.parametrize("backend", BACKENDS)
def test_mapped_scores_equal_the_heap_index_with_and_without_a_mask(backend: str, tmp_path: Path) -> None:
    heap, mapped = make_lexical_index(backend), new_mapped(backend, tmp_path)
    heap.build(IDS, TEXTS)
    mapped.build(IDS, TEXTS)
    assert all(isinstance(a, np.memmap) for a in held(mapped))
    mask = np.array([True, False, True, True, True, False])
    for query in QUERIES:
        assert np.array_equal(heap.scores(query), mapped.scores(query)), query
        assert np.array_equal(heap.scores(query, mask), mapped.scores(query, mask)), query
        assert heap.search(query, 3, mask) == mapped.search(query, 3, mask)
        assert heap.document_frequency(query, mask) == mapped.document_frequency(query, mask)
    assert any(heap.scores(q).any() for q in QUERIES)  # not vacuous: some queries score


@pytest.mark.parametrize("backend", BACKENDS)
def test_open_maps_the_newest_build_and_a_rebuild_leaves_a_mapping_readable(backend: str, tmp_path: Path) -> None:
    assert open_mapped(backend, tmp_path) is None
    first = new_mapped(backend, tmp_path)
    first.build(IDS, TEXTS)
    opened = open_mapped(backend, tmp_path)
    assert opened is not None and opened.doc_ids == IDS and isinstance(opened.doc_ids, StringColumn)
    assert open_mapped("bm25s" if backend != "bm25s" else "bm25-incremental", tmp_path) is None  # another backend's
    before = opened.scores("lodash ReDoS")
    generation = first.generation
    first.build([*IDS, "r6"], [*TEXTS, "lodash ReDoS again"])  # its earlier build removed; opened still maps it
    assert first.generation > generation and first.search("again", 1)[0].doc_id == "r6"
    assert np.array_equal(opened.scores("lodash ReDoS"), before)
    reopened = open_mapped(backend, tmp_path)
    assert reopened is not None and reopened.doc_ids == [*IDS, "r6"]
    assert len([p for p in tmp_path.iterdir() if p.name.startswith("index-")]) == 1


def test_added_records_score_as_in_the_heap_and_a_compaction_publishes_them(tmp_path: Path) -> None:
    heap, mapped = IncrementalBM25Index(), MappedIncrementalBM25Index(tmp_path)
    heap.build(IDS, TEXTS)
    mapped.build(IDS, TEXTS)
    more = [f"lodash advisory {i} on trim" for i in range(5000)]  # past the pending limit: compacted
    heap.add([f"n{i}" for i in range(5000)], more)
    mapped.add([f"n{i}" for i in range(5000)], more)
    assert np.array_equal(heap.scores("lodash trim"), mapped.scores("lodash trim"))
    assert not mapped._pending and isinstance(mapped._docs, np.memmap)
    assert isinstance(mapped.doc_ids, StringColumn) and mapped.doc_ids.position("n4999") == len(IDS) + 4999
    assert isinstance(mapped._terms, StringColumn) and not mapped._tokenizer.word_to_id  # the vocabulary mapped, not in dicts
    reopened = open_mapped("bm25-incremental", tmp_path)
    assert reopened is not None and np.array_equal(reopened.scores("lodash trim"), heap.scores("lodash trim"))
    late = ["wombats and lodash", "the", "", "Ünïcode wömbat 4242"]  # new terms, only stop words, none
    for index in (heap, mapped):
        index.add([f"late{i}" for i in range(len(late))], late)  # pending: ids and new terms in the heap until a compaction
    assert mapped.doc_ids.position("late3") == len(IDS) + 5003
    probes = [*more[:50], *late, "wombat 4242 lodash", "unknownword"]
    assert mapped._token_ids(probes, update=False) == heap._token_ids(probes, update=False)
    for query in ("wombat", "lodash 4242", "ünïcode", "advisory 17 trim", "the"):
        assert np.array_equal(heap.scores(query), mapped.scores(query)), query
        assert heap.document_frequency(query) == mapped.document_frequency(query), query
    mapped._compact()  # the new terms published with the postings
    reopened = open_mapped("bm25-incremental", tmp_path)
    assert reopened is not None and np.array_equal(reopened.scores("wömbat 4242"), heap.scores("wömbat 4242"))


def test_a_backend_without_a_mapped_form_is_refused_by_name(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="the rank-bm25 BM25 backend cannot be memory-mapped"):
        new_mapped("rank-bm25", tmp_path)
