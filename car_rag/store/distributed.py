"""Ingest with the embedding on a Ray cluster (``car-rag ingest --engine ray``, ``car-rag[ray]``).

Embedding is over 90% of an ingest, and it is the one part that needs no store: Ray Data sends the
texts of the records to store to a pool of encoder actors (one CPU each, or one GPU each), and this
process commits the vectors as they come back, a chunk at a time, through the store's own ingest
(:meth:`CARStore.ingest <car_rag.store.CARStore.ingest>` with ``encode``). So everything else is as
in a local ingest: records are parsed and checked here with the same errors, a record already stored
unchanged is skipped before it is sent to be embedded, each chunk is one commit, a re-run resumes
after the committed chunks, and the graph and BM25 are built from what was committed, never by a
worker. An encoder actor that dies is restarted by Ray and its batch run again; only this process
writes, so no record is committed twice.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from car_rag.embedding import Embedder
from car_rag.extras import require
from car_rag.records import Record
from car_rag.store.car_store import CARStore
from car_rag.store.ingest import DEFAULT_CHUNK, ChunkEncoder, IngestReport

__all__ = ["DEFAULT_WORKERS", "ingest_on_ray", "ray_encoder"]

log = logging.getLogger(__package__)

DEFAULT_WORKERS = 2
"""Encoder actors when none are asked for; a local cluster started for the ingest has as many CPUs."""


class _Encode:
    """One encoder actor: the store's model, loaded once, on the actor's own CPU (one thread) or GPU."""

    def __init__(self, model_name: str, encoder: str, device: str, batch_size: int):
        if device == "cpu":
            os.environ["OMP_NUM_THREADS"] = "1"  # the actor holds one CPU; ONNX Runtime and torch read it when loaded
        self.embedder = Embedder(model_name, encoder=encoder, device=device, batch_size=batch_size)

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return {"row": batch["row"], "vector": self.embedder.encode([str(t) for t in batch["text"]])}


def ray_encoder(embedder: Embedder, *, workers: int = DEFAULT_WORKERS, device: str = "cpu", batch_size: int = 64) -> ChunkEncoder:
    """An ``encode`` for :meth:`CARStore.ingest <car_rag.store.CARStore.ingest>`: ``workers`` actors of the
    connected Ray cluster run ``embedder``'s model (on ``device``, ``batch_size`` texts at a time) over the
    records Ray Data hands them; chunks come back as they are done."""
    ray = require("ray", "ray", "ingest on Ray")
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    encoder = embedder.encoder if device == "cpu" else "torch"  # the ONNX encoder runs on CPU only

    def encode(records: Sequence[Record], chunk_size: int) -> Iterator[tuple[Sequence[Record], np.ndarray]]:
        texts = ray.data.from_items([{"row": i, "text": r.text} for i, r in enumerate(records)])
        vectors = texts.map_batches(
            _Encode,
            fn_constructor_kwargs={
                "model_name": embedder.model_name,
                "encoder": encoder,
                "device": device,
                "batch_size": batch_size,
            },
            batch_size=batch_size,
            concurrency=workers,
            num_cpus=0 if device != "cpu" else 1,
            num_gpus=1 if device != "cpu" else 0,
        )
        for batch in vectors.iter_batches(batch_size=chunk_size, batch_format="numpy"):
            yield [records[int(i)] for i in batch["row"]], np.asarray(batch["vector"], dtype=np.float32)

    return encode


def ingest_on_ray(
    store: CARStore,
    source: str | Path | Iterable[Record | dict[str, Any]],
    *,
    address: str | None = None,
    workers: int = DEFAULT_WORKERS,
    device: str = "cpu",
    batch_size: int = 64,
    chunk_size: int = DEFAULT_CHUNK,
    progress: bool = False,
    strict: bool = False,
) -> IngestReport:
    """Ingest ``source`` (a JSONL or Parquet path, or records) into ``store``, embedding on Ray.

    ``address`` joins a running cluster (``ray start``; car-rag and the model must be installed on its
    nodes); without it a local cluster of ``workers`` CPUs is started for the ingest and stopped after
    it. The report, resumption and errors are those of :meth:`CARStore.ingest`; a Parquet row's errors
    name it ``<records>:ROW`` (its row number from 1, over the file or the folder's files in order).
    """
    ray = require("ray", "ray", "ingest on Ray")
    encode_on = ray_encoder(store.embedder, workers=workers, device=device, batch_size=batch_size)
    started = False

    def encode(records: Sequence[Record], chunk: int) -> Iterator[tuple[Sequence[Record], np.ndarray]]:
        nonlocal started
        if not ray.is_initialized():  # only once there is something to embed
            started = True
            if address is None:
                ray.init(num_cpus=workers, include_dashboard=False, log_to_driver=False, configure_logging=False)
            else:
                ray.init(address=address, log_to_driver=False, configure_logging=False)
            ray.data.DataContext.get_current().enable_progress_bars = progress
        yield from encode_on(records, chunk)

    try:
        return store.ingest(_read(ray, source), progress=progress, strict=strict, chunk_size=chunk_size, encode=encode)
    finally:
        if started:
            ray.shutdown()


def _read(ray: Any, source: str | Path | Iterable[Record | dict[str, Any]]) -> Any:
    """``source`` as the store's ingest takes it: a Parquet file or folder read by Ray Data into rows,
    anything else as it is."""
    if not isinstance(source, (str, Path)) or not _is_parquet(Path(source)):
        return source
    rows: list[dict[str, Any]] = []
    for block in ray.data.read_parquet(str(source)).to_arrow_refs():
        rows.extend(_present(row) for row in ray.get(block).to_pylist())
    return rows


def _present(row: dict[str, Any]) -> dict[str, Any]:
    """``row`` without its nulls, at any depth of its objects: Parquet gives every row every column and
    every field of a struct (a ``scope`` key some rows have), null where the record has none, as a JSONL
    line would leave it out."""
    return {k: _present(v) if isinstance(v, dict) else v for k, v in row.items() if v is not None}


def _is_parquet(path: Path) -> bool:
    return path.suffix == ".parquet" or (path.is_dir() and any(path.glob("*.parquet")))
