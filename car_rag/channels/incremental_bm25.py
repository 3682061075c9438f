"""BM25 that grows one record at a time: streaming inserts without rebuilding the index.

bm25s precomputes every (term, record) score, so one new record changes the IDF and the
average length behind all of them and forces a rebuild. This index stores raw term
frequencies in per-term postings and scores at query time, with bm25s's tokenizer and
formula (Lucene BM25: ``idf = ln(1 + (N - df + 0.5) / (df + 0.5))``, k1=1.5, b=0.75), so it
ranks as a freshly built bm25s index would. New postings go to a small pending area that is
merged into the compact arrays once it reaches a tenth of them (amortized O(1) per insert).
As the statistics are counted at query time, a caller's mask gives them over the records it
may read (each posting list filtered by the mask): one index serves every tenant.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import Stemmer
from bm25s.tokenization import Tokenizer

from car_rag.channels.base import LexicalIndex
from car_rag.mapped_files import StringColumn

__all__ = ["IncrementalBM25Index"]

K1, B = 1.5, 0.75
_MIN_PENDING = 4096


class IncrementalBM25Index(LexicalIndex):
    """Okapi BM25 (Lucene variant), English stop words removed, Snowball-stemmed; ``add`` is incremental."""

    backend = "bm25-incremental"
    supports_add = True
    doc_ids: list[str] | StringColumn
    """A list; mapped from files where the index is (:mod:`car_rag.channels.mapped_bm25`)."""

    def __init__(self) -> None:
        super().__init__()
        self._tokenizer = Tokenizer(stemmer=Stemmer.Stemmer("english").stemWord, stopwords="en")
        self._reset()

    def _reset(self) -> None:
        self.doc_ids = []
        self._lengths = np.zeros(1024, dtype=np.float32)
        self._total_length = 0.0
        # Compact postings (CSR by term id) and the pending ones added since the last merge.
        self._ptr = np.zeros(1, dtype=np.int64)
        self._docs = np.zeros(0, dtype=np.int32)
        self._tf = np.zeros(0, dtype=np.float32)
        self._pending: dict[int, tuple[list[int], list[int]]] = {}
        self._pending_count = 0

    # ------------------------------------------------------------------ writing
    def build(self, doc_ids: Sequence[str], texts: Sequence[str]) -> None:
        self._tokenizer.reset_vocab()
        self._reset()
        self.add(doc_ids, texts)
        self._compact()

    def add(self, doc_ids: Sequence[str], texts: Sequence[str]) -> None:
        """Append records after those already indexed (their slots follow corpus order)."""
        if len(doc_ids) != len(texts):
            raise ValueError(f"{len(doc_ids)} doc ids for {len(texts)} texts")
        if not doc_ids:
            return
        token_ids = self._token_ids(texts, update=True)
        first = len(self.doc_ids)
        needed = first + len(doc_ids)
        if needed > len(self._lengths):
            grown = np.zeros(max(needed, 2 * len(self._lengths)), dtype=np.float32)
            grown[:first] = self._lengths[:first]
            self._lengths = grown
        for slot, ids in enumerate(token_ids, first):
            self._lengths[slot] = len(ids)
            self._total_length += len(ids)
            for term, tf in Counter(ids).items():
                docs, tfs = self._pending.setdefault(term, ([], []))
                docs.append(slot)
                tfs.append(tf)
            self._pending_count += len(ids)
        self.doc_ids.extend(doc_ids)
        self.generation += 1
        if self._pending_count > max(_MIN_PENDING, len(self._docs) // 10):
            self._compact()

    def _token_ids(self, texts: Sequence[str], *, update: bool) -> list[list[int]]:
        """Each text's term ids; ``update``: new terms get new ids (else unknown words are dropped,
        and a text left with none holds the empty token, id 0)."""
        ids: list[list[int]] = self._tokenizer.tokenize(list(texts), update_vocab=update, return_as="ids", show_progress=False)
        return ids

    def _compact(self) -> None:
        """Merge pending postings into the CSR arrays (stable: records stay in slot order)."""
        if not self._pending:
            return
        vocab = max(len(self._ptr) - 1, max(self._pending) + 1)
        main_terms = np.repeat(np.arange(len(self._ptr) - 1, dtype=np.int64), np.diff(self._ptr))
        new_terms = np.concatenate([np.full(len(d), t, dtype=np.int64) for t, (d, _) in self._pending.items()])
        new_docs = np.concatenate([np.asarray(d, dtype=np.int32) for d, _ in self._pending.values()])
        new_tf = np.concatenate([np.asarray(f, dtype=np.float32) for _, f in self._pending.values()])
        terms = np.concatenate([main_terms, new_terms])
        order = np.argsort(terms, kind="stable")
        self._docs = np.concatenate([self._docs, new_docs])[order]
        self._tf = np.concatenate([self._tf, new_tf])[order]
        self._ptr = np.zeros(vocab + 1, dtype=np.int64)
        np.cumsum(np.bincount(terms, minlength=vocab), out=self._ptr[1:])
        self._pending, self._pending_count = {}, 0

    # ------------------------------------------------------------------ reading
    def _postings(self, term: int, mask: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """The records holding ``term`` (those ``mask`` selects, with one) and its frequency in each."""
        docs: np.ndarray = np.zeros(0, dtype=np.int32)
        tf: np.ndarray = np.zeros(0, dtype=np.float32)
        if term < len(self._ptr) - 1:
            start, stop = self._ptr[term], self._ptr[term + 1]
            docs, tf = self._docs[start:stop], self._tf[start:stop]
        extra = self._pending.get(term)
        if extra:
            docs = np.concatenate([docs, np.asarray(extra[0], dtype=np.int32)]).astype(np.int64, copy=False)
            tf = np.concatenate([tf, np.asarray(extra[1], dtype=np.float32)])
        if mask is not None:
            kept = mask[docs]
            docs, tf = docs[kept], tf[kept]
        return docs, tf

    def scores(self, query: str, mask: np.ndarray | None = None) -> np.ndarray:
        n = len(self.doc_ids)
        scores = np.zeros(n, dtype=np.float32)
        if not n:
            return scores
        ids = self._token_ids([query], update=False)[0]
        if mask is None or mask.all():
            count, total, mask = n, self._total_length, None
        else:  # the statistics of the records the caller may read
            count = int(np.count_nonzero(mask))
            total = float(self._lengths[:n][mask].sum(dtype=np.float64))
            if not count:
                return scores
        avg = total / count
        for term in ids:
            if term == 0:  # the empty token: unknown words map to it, and empty records hold it
                continue
            docs, tf = self._postings(term, mask)
            if not len(docs):
                continue
            idf = np.log(1.0 + (count - len(docs) + 0.5) / (len(docs) + 0.5))
            norm = K1 * (1.0 - B) + (K1 * B / avg) * self._lengths[docs]
            scores[docs] += (idf * tf / (norm + tf)).astype(np.float32)
        return scores

    def document_frequency(self, phrase: str, mask: np.ndarray | None = None) -> int:
        """Records (among ``mask``'s) holding every word of ``phrase`` that some of them hold
        (postings intersected), as an index over those records alone counts them."""
        ids = self._token_ids([phrase], update=False)[0]
        if not ids or 0 in ids:  # only stop words, or a word no record holds
            return 0
        held = [docs for docs in (self._postings(term, mask)[0] for term in ids) if len(docs)]
        if not held:
            return 0
        docs = held[0]
        for more in held[1:]:
            docs = np.intersect1d(docs, more, assume_unique=True)
        return len(docs)

    # ------------------------------------------------------------------ persistence
    def _save_body(self, folder: Path) -> None:
        self._compact()
        n = len(self.doc_ids)
        np.savez(folder / "postings.npz", ptr=self._ptr, docs=self._docs, tf=self._tf, lengths=self._lengths[:n])
        self._tokenizer.save_vocab(str(folder))
        self._tokenizer.save_stopwords(str(folder))

    def _load_body(self, folder: Path) -> None:
        doc_ids = self.doc_ids
        self._reset()
        self.doc_ids = doc_ids
        with np.load(folder / "postings.npz") as data:
            self._ptr, self._docs, self._tf = data["ptr"], data["docs"], data["tf"]
            self._lengths = np.array(data["lengths"], dtype=np.float32)
        self._total_length = float(self._lengths.sum(dtype=np.float64))
        self._tokenizer.load_vocab(str(folder))
        self._tokenizer.load_stopwords(str(folder))
