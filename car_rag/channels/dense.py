"""Dense retrieval: exact over vectors held in memory, else a vector engine's HNSW index.

Up to :data:`EXACT_SEARCH_LIMIT` records the search is exact, over vectors held in memory:
HNSW builds are not reproducible (chromadb 1.x inserts a batch on several threads, ignores
``num_threads`` in embedded mode and takes no seed), so the same corpus ingested twice would
rank differently; a matrix product over 20k MiniLM vectors takes about as long as one HNSW
query. That part is one code path (:class:`VectorChannel`) whichever engine holds the vectors:
Chroma (:class:`DenseChannel`) or pgvector in the store's PostgreSQL
(:class:`~car_rag.postgres.vectors.PgVectorChannel`).

Reading the vectors back from Chroma takes about a second at 10k records (it hands them over
as Python floats), which a process answering one query pays in full: a store on Chroma keeps a
copy beside itself (:meth:`DenseChannel.save`), used only while it matches the records exactly.
"""

from __future__ import annotations

import json
import logging
import os
from abc import ABC, abstractmethod
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from car_rag.channels.base import ChannelHit

__all__ = ["VectorChannel", "DenseChannel", "EXACT_SEARCH_LIMIT"]

log = logging.getLogger(__name__)

EXACT_SEARCH_LIMIT = int(os.environ.get("CAR_RAG_EXACT_SEARCH_LIMIT") or 20_000)
"""Collections up to this size are searched exactly once :meth:`DenseChannel.load` has read them
(``CAR_RAG_EXACT_SEARCH_LIMIT`` sets it for a process: the memory exact search holds, 1.5 kB per
record, against Chroma's approximate search and its availability)."""


WIDEST = 32
"""How many times ``k`` nearest records an unfiltered engine search may read to find ``k`` that a
query's date or filter admits (:meth:`VectorChannel.search`), before the engine's filtered search."""


def _unit(vectors: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length (cosine similarity is then a dot product, as in Chroma)."""
    vectors = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(vectors, axis=-1, keepdims=True)
    return vectors / np.where(norms > 0, norms, 1.0)


class _ExactIndex:
    """Every vector of a collection, one row per id, for exact cosine search."""

    def __init__(self) -> None:
        self.ids: list[str] = []
        self.rows: dict[str, int] = {}
        self._matrix: np.ndarray | None = None  # rows beyond len(ids) are spare capacity

    def put(self, ids: Sequence[str], vectors: np.ndarray) -> None:
        """Replace the rows of known ids and append the others; the matrix grows by doubling,
        so streamed inserts seldom copy it."""
        vectors = _unit(vectors)
        new = [d for d in dict.fromkeys(ids) if d not in self.rows]
        matrix, size = self._matrix, len(self.ids) + len(new)
        if matrix is None or size > len(matrix):
            capacity = max(size, 64, 0 if matrix is None else 2 * len(matrix))
            grown = np.zeros((capacity, vectors.shape[1]), dtype=np.float32)
            if matrix is not None:
                grown[: len(matrix)] = matrix
            matrix = self._matrix = grown
        for doc_id in new:
            self.rows[doc_id] = len(self.ids)
            self.ids.append(doc_id)
        matrix[[self.rows[d] for d in ids]] = vectors

    def restore(self, ids: Sequence[str], unit_rows: np.ndarray) -> None:
        """Take rows :meth:`rows_in_use` returned before, as they are (normalising them again
        could move a score by one bit, and a tie at the cut with it)."""
        self.ids = list(ids)
        self.rows = {doc_id: i for i, doc_id in enumerate(self.ids)}
        # An empty store's copy holds a (0, 0) matrix, which no vector can be put beside.
        self._matrix = np.ascontiguousarray(unit_rows, dtype=np.float32) if self.ids else None

    def rows_in_use(self) -> np.ndarray:
        return np.zeros((0, 0), dtype=np.float32) if self._matrix is None else self._matrix[: len(self.ids)]

    def search(self, vector: np.ndarray, k: int, allowed: np.ndarray | None) -> list[ChannelHit]:
        if self._matrix is None:
            return []
        scores = self._matrix[: len(self.ids)] @ _unit(vector)
        count = len(self.ids)
        if allowed is not None:
            scores = np.where(allowed, scores, -np.inf)
            count = int(allowed.sum())
        k = min(k, count)
        if k <= 0:
            return []
        # Everything scoring at least the k-th best, ties at the cut included, ordered by
        # score then id: which of several equal vectors is shown never depends on the build.
        cut = np.partition(scores, -k)[-k]
        best = sorted(np.flatnonzero(scores >= cut), key=lambda i: (-scores[i], self.ids[i]))[:k]
        return [ChannelHit(self.ids[i], float(scores[i]), rank) for rank, i in enumerate(best, 1)]


class VectorChannel(ABC):
    """Nearest neighbours by cosine similarity; ``where`` is the caller gate as a Chroma metadata
    filter (:meth:`~car_rag.eligibility.CallerContext.chroma_where`), applied before ranking (a
    pre-filter, so filtered-out records are never candidates).

    Up to ``exact_limit`` records (:meth:`hold`, :meth:`put`) the search is exact, and the engine
    at most says which records ``where`` admits (:meth:`_matching`, where the caller gives no
    ``readable``); past it the engine's approximate index answers (:meth:`_nearest`). An engine
    implements those two."""

    widens = False
    """Whether a search with ``share`` reads the engine's unfiltered nearest records first (an engine
    whose filtered search costs far more than an unfiltered one: Chroma's)."""

    def __init__(self, *, exact_limit: int = EXACT_SEARCH_LIMIT):
        self._exact_limit = exact_limit
        self._exact: _ExactIndex | None = None
        self._allowed: dict[str, np.ndarray] = {}
        """Rows each ``where`` filter admits (exact search), keyed by the filter as JSON."""

    @property
    def exact(self) -> bool:
        """Whether searches are exact (else the engine's approximate HNSW index answers)."""
        return self._exact is not None

    @property
    def exact_limit(self) -> int:
        """The most records searched exactly; lowered below what is held, the engine answers from now on."""
        return self._exact_limit

    @exact_limit.setter
    def exact_limit(self, limit: int) -> None:
        self._exact_limit = limit
        if self._exact is not None and len(self._exact.ids) > limit:
            self._exact, self._allowed = None, {}

    @abstractmethod
    def _nearest(self, vector: np.ndarray, k: int, where: Mapping[str, Any] | None) -> list[ChannelHit]:
        """The engine's approximate top ``k`` among the records ``where`` admits."""

    @abstractmethod
    def _matching(self, where: Mapping[str, Any]) -> Iterable[str]:
        """The ids of every record ``where`` admits, as the engine evaluates it."""

    @abstractmethod
    def close(self) -> None:
        """Let go of what the engine holds open (connections); the channel is not used after."""

    def hold(self, order: Sequence[str], vectors: Mapping[str, np.ndarray]) -> None:
        """Search exactly over ``vectors`` (rows in ``order``), read from elsewhere than the engine
        (a shared record log keeps them); beyond ``exact_limit`` records, the engine answers."""
        self._allowed = {}
        self._exact = None
        if len(order) <= self.exact_limit:
            if missing := [d for d in order if d not in vectors]:
                raise ValueError(f"no vector for {len(missing)} records (e.g. {missing[0]!r}) to search exactly")
            exact = _ExactIndex()
            if order:
                exact.put(order, np.vstack([vectors[d] for d in order]))
            self._exact = exact

    def held(self) -> tuple[list[str], np.ndarray] | None:
        """The ids and unit rows exact search holds (None when the engine answers): what
        :meth:`hold_rows` takes, e.g. to search a subset of the records with the same scores."""
        exact = self._exact
        return None if exact is None else (list(exact.ids), exact.rows_in_use())

    def hold_rows(self, ids: Sequence[str], unit_rows: np.ndarray) -> None:
        """Search exactly over rows :meth:`held` returned (not normalised again: a score moved by
        one bit could move a tie at the cut)."""
        exact = _ExactIndex()
        exact.restore(ids, unit_rows)
        self._exact, self._allowed = exact, {}

    def put(self, doc_ids: Sequence[str], vectors: np.ndarray) -> None:
        """Set the exact-search rows of ``doc_ids`` (no-op when the engine answers): records another
        process wrote, or whose vectors reach the engine later."""
        self._allowed = {}
        if self._exact is not None:
            self._exact.put(doc_ids, vectors)
            if len(self._exact.ids) > self.exact_limit:
                self._exact = None  # grown past the limit: HNSW from now on

    def search(
        self,
        vector: np.ndarray,
        k: int,
        where: Mapping[str, Any] | None = None,
        readable: Callable[[Sequence[str]], np.ndarray] | None = None,
        share: float | None = None,
    ) -> list[ChannelHit]:
        """Top ``k`` by cosine among the records ``where`` admits. ``readable`` (ids → mask)
        decides the same from the records in memory, so exact search never asks the engine
        (which may be down, or behind a shared store's commits); the engine's search uses ``where``.

        ``share``, the part of the records ``where`` admits (the caller counted it in memory), lets
        an engine that :attr:`widens` answer from its unfiltered nearest records instead, read
        deep enough to hold ``k`` that ``readable`` admits (:meth:`_widened`)."""
        if k <= 0:
            return []
        exact = self._exact
        if exact is not None:
            return exact.search(vector, k, self._admitted(exact, where, readable) if where else None)
        if where and readable is not None and share and self.widens:
            return self._widened(vector, k, where, readable, share)
        return self._nearest(vector, k, where or None)

    def _widened(
        self, vector: np.ndarray, k: int, where: Mapping[str, Any], readable: Callable[[Sequence[str]], np.ndarray], share: float
    ) -> list[ChannelHit]:
        """The ``k`` nearest admitted records, from the engine's unfiltered nearest ``n``: where
        ``k`` of them are admitted, those are the admitted ``k`` nearest (an admitted record nearer
        than they would be among the ``n``): nothing is cut from a top ``k``. ``n`` starts at twice
        what ``share`` says holds ``k`` and grows fourfold; past ``WIDEST`` × ``k`` the engine's
        filtered search answers (a narrow filter, which that search serves at a cost that grows
        with the records admitted)."""
        n = max(k, int(np.ceil(2 * k / share)))
        while n <= WIDEST * k:
            hits = self._nearest(vector, n, None)
            kept = [hit for hit, ok in zip(hits, readable([h.doc_id for h in hits])) if ok]
            if len(kept) >= k or len(hits) < n:  # enough, or every record read
                return [ChannelHit(hit.doc_id, hit.score, rank) for rank, hit in enumerate(kept[:k], 1)]
            n *= 4
        return self._nearest(vector, k, where)

    def _admitted(
        self, exact: _ExactIndex, where: Mapping[str, Any], readable: Callable[[Sequence[str]], np.ndarray] | None
    ) -> np.ndarray:
        """The rows ``where`` admits, by ``readable`` or as the engine evaluates it (once per filter
        until the rows change)."""
        key = json.dumps(where, sort_keys=True, default=str)
        mask = self._allowed.get(key)
        if mask is not None:
            return mask
        if readable is not None:
            mask = readable(exact.ids)
        else:
            admitted = self._matching(where)
            mask = np.zeros(len(exact.ids), dtype=bool)
            mask[[exact.rows[d] for d in admitted if d in exact.rows]] = True
        if len(self._allowed) >= 64:
            self._allowed = {}
        self._allowed[key] = mask
        return mask


class DenseChannel(VectorChannel):
    """Dense search over a Chroma collection holding the records' embeddings (embedded, or a
    Chroma server).

    Chroma's HNSW index answers until :meth:`load` (or :meth:`hold`) has taken the vectors of at
    most ``exact_limit`` records; from then on the search is exact, and stays so while
    :meth:`upsert` keeps the collection within that size.
    """

    widens = True  # Chroma's filtered search reads every admitted record's metadata: ~0.5 s at 100k

    def __init__(self, collection: Any, *, exact_limit: int = EXACT_SEARCH_LIMIT):
        super().__init__(exact_limit=exact_limit)
        self.collection = collection

    def load(self, order: Sequence[str] = (), count: int | None = None, *, copy: Path | None = None, stamp: str = "") -> None:
        """Read every vector into memory for exact search when the collection (in cosine
        space) holds at most ``exact_limit`` records (``count``, when the caller already knows
        it); rows follow ``order``, then any other id in the collection.

        ``copy`` is a file :meth:`save` wrote: it is read instead of Chroma when it was saved
        with the same ``stamp`` (the caller's digest of what the vectors encode) for exactly
        the ids of ``order``, and written afresh otherwise."""
        self._exact, self._allowed = None, {}
        space = ((self.collection.configuration_json or {}).get("hnsw") or {}).get("space", "cosine")
        count = self.collection.count() if count is None else count
        if space != "cosine" or count > self.exact_limit:
            return  # exact search scores by cosine only; Chroma answers for other spaces
        if copy is not None and len(order) == count and self._restore(copy, order, stamp):
            return
        exact = _ExactIndex()
        got = self.collection.get(include=["embeddings"])
        if got["ids"]:
            position = {doc_id: i for i, doc_id in enumerate(got["ids"])}
            ids = [d for d in order if d in position]
            ids += sorted(position.keys() - set(ids))
            exact.put(ids, np.asarray(got["embeddings"], dtype=np.float32)[[position[d] for d in ids]])
        self._exact = exact
        if copy is not None:
            try:
                self.save(copy, stamp)
            except OSError as exc:  # a read-only store still answers; it reads Chroma next time too
                log.debug("cannot keep the exact-search vectors in %s: %s", copy, exc)

    def save(self, path: Path, stamp: str) -> None:
        """Keep the in-memory vectors in ``path`` with ``stamp`` for :meth:`load` (written whole
        or not at all); without exact search, remove it."""
        if self._exact is None:
            path.unlink(missing_ok=True)
            return
        partial = path.with_name(path.name + ".partial")
        with partial.open("wb") as f:
            np.savez(f, vectors=self._exact.rows_in_use(), ids=np.array(self._exact.ids, dtype=str), stamp=np.array(stamp))
        os.replace(partial, path)

    def _restore(self, path: Path, order: Sequence[str], stamp: str) -> bool:
        try:
            with np.load(path, allow_pickle=False) as saved:
                if str(saved["stamp"]) != stamp or saved["ids"].tolist() != list(order):
                    return False
                exact = _ExactIndex()
                exact.restore(order, saved["vectors"])
        except (OSError, ValueError, KeyError):  # absent, cut short, or not ours
            return False
        self._exact = exact
        return True

    def upsert(
        self,
        doc_ids: Sequence[str],
        vectors: np.ndarray,
        texts: Sequence[str],
        metadatas: Sequence[Mapping[str, Any]],
        batch_size: int,
        *,
        progress: bool = False,
        stored: Collection[str] | None = None,
        exact: bool = True,
    ) -> None:
        """Write in batches no larger than the client's cap (Chroma rejects larger ones).

        ``stored`` names the ids that may already be in the collection (None: any may be);
        only their stored metadata is read back to clear keys the new version lacks. ``exact``:
        refresh the exact-search rows from what the collection stored (off where :meth:`put`
        keeps them from another source)."""
        quiet = not progress or len(doc_ids) <= batch_size
        with tqdm(total=len(doc_ids), desc="chroma upsert", unit="rec", disable=quiet) as bar:
            for start in range(0, len(doc_ids), batch_size):
                stop = start + batch_size
                ids = list(doc_ids[start:stop])
                batch_meta = [dict(m) for m in metadatas[start:stop]]
                # Chroma merges metadata on upsert; a key the stored copy has and the new one
                # lacks must be sent as None to be deleted, or Stage-2 lookups find stale scope.
                known = ids if stored is None else [d for d in ids if d in stored]
                found = self.collection.get(ids=known, include=["metadatas"]) if known else {"ids": [], "metadatas": []}
                previous = dict(zip(found["ids"], found["metadatas"]))
                for doc_id, meta in zip(ids, batch_meta):
                    for key in previous.get(doc_id) or {}:
                        meta.setdefault(key, None)
                self.collection.upsert(
                    ids=ids, embeddings=vectors[start:stop], documents=list(texts[start:stop]), metadatas=batch_meta
                )
                bar.update(len(doc_ids[start:stop]))
        self._allowed = {}
        if self._exact is not None and exact:
            # The vectors as Chroma stored them (it normalises them its own way, to the last
            # bit), which is what a reopened store reads: both rank alike.
            written = self.collection.get(ids=list(doc_ids), include=["embeddings"])
            self.put(written["ids"], np.asarray(written["embeddings"], dtype=np.float32))

    def ids(self, page: int = 10_000) -> list[str]:
        """Every id in the collection, read in pages."""
        out: list[str] = []
        while True:
            got = self.collection.get(include=[], limit=page, offset=len(out))["ids"]
            out += got
            if len(got) < page:
                return out

    def _nearest(self, vector: np.ndarray, k: int, where: Mapping[str, Any] | None) -> list[ChannelHit]:
        # No count() first: it scans the collection (~19 ms at 100k records), and Chroma
        # answers an empty collection or k above its size with what it has.
        result = self.collection.query(
            query_embeddings=[np.asarray(vector, dtype=np.float32)],
            n_results=k,
            where=dict(where) if where else None,
            include=["distances"],
        )
        ids, distances = result["ids"][0], result["distances"][0]
        return [ChannelHit(d, 1.0 - float(dist), r) for r, (d, dist) in enumerate(zip(ids, distances), 1)]

    def _matching(self, where: Mapping[str, Any]) -> list[str]:
        return list(self.collection.get(where=dict(where), include=[])["ids"])

    def close(self) -> None:
        """Nothing to let go of: the Chroma client is the store's."""
