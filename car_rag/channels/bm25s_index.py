"""BM25 with ``bm25s`` (sparse matrices, sub-millisecond queries): the default backend."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import bm25s
import numpy as np
import Stemmer
from bm25s.tokenization import Tokenizer

from car_rag.channels.base import LexicalIndex

__all__ = ["BM25sIndex"]


class BM25sIndex(LexicalIndex):
    """Okapi BM25 (k1=1.5, b=0.75), English stop words removed, Snowball-stemmed."""

    backend = "bm25s"

    def __init__(self) -> None:
        super().__init__()
        self._tokenizer = Tokenizer(stemmer=Stemmer.Stemmer("english").stemWord, stopwords="en")
        self._bm25 = bm25s.BM25(k1=1.5, b=0.75)

    def build(self, doc_ids: Sequence[str], texts: Sequence[str]) -> None:
        self.doc_ids = list(doc_ids)
        if not self.doc_ids:
            return  # bm25s cannot index an empty corpus; scores() answers for it
        self._tokenizer.reset_vocab()
        tokens = self._tokenizer.tokenize(list(texts), return_as="tuple", show_progress=False)
        self._bm25 = bm25s.BM25(k1=1.5, b=0.75)
        self._bm25.index(tokens, show_progress=False)

    def scores(self, query: str) -> np.ndarray:
        if not self.doc_ids:
            return np.zeros(0, dtype=np.float32)
        ids = self._tokenizer.tokenize([query], update_vocab=False, return_as="ids", show_progress=False)[0]
        # Id 0 is the empty token: unknown query words map to it, and empty documents hold it.
        known = [i for i in ids if i != 0]
        if not known:
            return np.zeros(len(self.doc_ids), dtype=np.float32)
        return np.asarray(self._bm25.get_scores(known), dtype=np.float32)

    def _save_body(self, folder: Path) -> None:
        self._bm25.save(str(folder), show_progress=False)
        self._tokenizer.save_vocab(str(folder))
        self._tokenizer.save_stopwords(str(folder))

    def _load_body(self, folder: Path) -> None:
        self._bm25 = bm25s.BM25.load(str(folder))
        self._tokenizer.load_vocab(str(folder))
        self._tokenizer.load_stopwords(str(folder))
