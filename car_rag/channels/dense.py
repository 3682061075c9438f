"""Dense retrieval over a Chroma collection holding the records' embeddings."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from car_rag.channels.base import ChannelHit

__all__ = ["DenseChannel"]


class DenseChannel:
    """Nearest neighbours by cosine similarity; ``where`` is a Chroma metadata filter applied
    inside the index search (a pre-filter, so filtered-out records are never candidates)."""

    def __init__(self, collection: Any):
        self.collection = collection

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
    ) -> None:
        """Write in batches no larger than the client's cap (Chroma rejects larger ones).

        ``stored`` names the ids that may already be in the collection (None: any may be);
        only their stored metadata is read back to clear keys the new version lacks."""
        with tqdm(total=len(doc_ids), desc="chroma upsert", unit="rec", disable=not progress or len(doc_ids) <= batch_size) as bar:
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

    def ids(self, page: int = 10_000) -> list[str]:
        """Every id in the collection, read in pages."""
        out: list[str] = []
        while True:
            got = self.collection.get(include=[], limit=page, offset=len(out))["ids"]
            out += got
            if len(got) < page:
                return out

    def search(self, vector: np.ndarray, k: int, where: Mapping[str, Any] | None = None) -> list[ChannelHit]:
        if k <= 0:
            return []
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
