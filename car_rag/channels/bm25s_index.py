"""BM25 with ``bm25s`` (sparse matrices, sub-millisecond queries): the default backend."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import bm25s
import numpy as np
import Stemmer
from bm25s.tokenization import Tokenized, Tokenizer

from car_rag.channels.base import LexicalIndex, ReaderIndexes

__all__ = ["BM25sIndex"]

TOKENS = "corpus-tokens.npz"


class BM25sIndex(LexicalIndex):
    """Okapi BM25 (k1=1.5, b=0.75), English stop words removed, Snowball-stemmed.

    bm25s precomputes every (term, record) score with the whole corpus's statistics, so a
    caller's mask is answered by an index over the masked records alone, built from the
    corpus's token ids (kept for that) on the mask's first query."""

    backend = "bm25s"

    def __init__(self) -> None:
        super().__init__()
        self._tokenizer = Tokenizer(stemmer=Stemmer.Stemmer("english").stemWord, stopwords="en")
        self._bm25 = bm25s.BM25(k1=1.5, b=0.75)
        self._tokens = np.zeros(0, dtype=np.int32)
        self._offsets = np.zeros(1, dtype=np.int64)
        self._readers: ReaderIndexes[bm25s.BM25] = ReaderIndexes(self._reader_index)

    def build(self, doc_ids: Sequence[str], texts: Sequence[str]) -> None:
        self.doc_ids = list(doc_ids)
        self._readers.clear()
        if not self.doc_ids:
            return  # bm25s cannot index an empty corpus; scores() answers for it
        self._tokenizer.reset_vocab()
        tokens = self._tokenizer.tokenize(list(texts), return_as="tuple", show_progress=False)
        self._bm25 = bm25s.BM25(k1=1.5, b=0.75)
        self._bm25.index(tokens, show_progress=False)
        self._tokens = np.fromiter((t for ids in tokens.ids for t in ids), dtype=np.int32)
        self._offsets = np.zeros(len(tokens.ids) + 1, dtype=np.int64)
        np.cumsum([len(ids) for ids in tokens.ids], out=self._offsets[1:])

    def _reader_index(self, positions: np.ndarray) -> bm25s.BM25:
        ids = [self._tokens[self._offsets[p] : self._offsets[p + 1]].tolist() for p in positions]
        index = bm25s.BM25(k1=1.5, b=0.75)
        index.index(Tokenized(ids=ids, vocab=dict(self._tokenizer.get_vocab_dict())), show_progress=False)
        return index

    def scores(self, query: str, mask: np.ndarray | None = None) -> np.ndarray:
        n = len(self.doc_ids)
        if not n:
            return np.zeros(0, dtype=np.float32)
        ids = self._tokenizer.tokenize([query], update_vocab=False, return_as="ids", show_progress=False)[0]
        # Id 0 is the empty token: unknown query words map to it, and empty documents hold it.
        known = [i for i in ids if i != 0]
        if not known or (mask is not None and not mask.any()):
            return np.zeros(n, dtype=np.float32)
        if mask is None or mask.all():
            return np.asarray(self._bm25.get_scores(known), dtype=np.float32)
        positions, reader = self._readers.get(mask)
        scores = np.zeros(n, dtype=np.float32)
        scores[positions] = reader.get_scores(known)
        return scores

    def _save_body(self, folder: Path) -> None:
        self._bm25.save(str(folder), show_progress=False)
        self._tokenizer.save_vocab(str(folder))
        self._tokenizer.save_stopwords(str(folder))
        np.savez(folder / TOKENS, tokens=self._tokens, offsets=self._offsets)

    def _load_body(self, folder: Path) -> None:
        # An index saved before the token ids were kept has no TOKENS: FileNotFoundError, and
        # the store rebuilds it.
        with np.load(folder / TOKENS) as data:
            self._tokens, self._offsets = data["tokens"], data["offsets"]
        self._readers.clear()
        self._bm25 = bm25s.BM25.load(str(folder))
        self._tokenizer.load_vocab(str(folder))
        self._tokenizer.load_stopwords(str(folder))
