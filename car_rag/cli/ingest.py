"""``car-rag ingest``: add or replace records in a store; rejected records are named, the rest stored."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from car_rag.channels.lexical import BACKENDS
from car_rag.cli.command import Command, UsageError, count
from car_rag.cli.extract import extract_arguments, print_report
from car_rag.cli.options import authority, authority_arguments, embedder, embedder_arguments
from car_rag.embedding import ENCODERS
from car_rag.extras import require
from car_rag.store import DEFAULT_CHUNK, VECTOR_STORES
from car_rag.store.distributed import DEFAULT_WORKERS


def _arguments(ingest: argparse.ArgumentParser) -> None:
    ingest.add_argument(
        "corpus",
        type=Path,
        help="JSONL corpus in the neutral record format (raw documents with --extract; with --engine ray, Parquet too)",
    )
    ingest.add_argument("--store", type=Path, required=True, help="store directory (created if missing)")
    ingest.add_argument("--policy", help="built-in policy name or .toml/.json file (needed to create a store)")
    ingest.add_argument("--chroma-url", help="keep vectors in a Chroma server, e.g. http://127.0.0.1:8000 (default: embedded)")
    ingest.add_argument("--bm25-backend", default="bm25-incremental", choices=list(BACKENDS), help="lexical index of a new store")
    ingest.add_argument(
        "--encoder",
        choices=list(ENCODERS),
        help="MiniLM encoder of a new store: onnx (ONNX Runtime) or torch (sentence-transformers on "
        "PyTorch); an existing store keeps its own (default: onnx for a new store)",
    )
    embedder_arguments(ingest)
    authority_arguments(ingest)
    ingest.add_argument(
        "--vector-store",
        choices=list(VECTOR_STORES),
        help="where a new store keeps the vectors it searches past 20k records: chroma (embedded, or the "
        "server of --chroma-url) or pgvector (in the PostgreSQL of --authority-url, written with "
        "the records); an existing store keeps its own (default: chroma for a new store)",
    )
    ingest.add_argument(
        "--chunk-size",
        type=count,
        default=DEFAULT_CHUNK,
        help="records embedded and committed together: a crash keeps every committed chunk, and running "
        "the same command again resumes after them",
    )
    ingest.add_argument(
        "--extract",
        action="store_true",
        help="the corpus is raw documents (doc_id and text): make records of them first, as car-rag extract "
        "does with the store's policy, citations resolving to this input and to the records already stored",
    )
    extract_arguments(ingest)
    ingest.add_argument(
        "--engine",
        choices=["local", "ray"],
        default="local",
        help="where the records are embedded: in this process, or on Ray actors (car-rag[ray]); this process "
        "commits either way, so chunks, resumption and errors are the same",
    )
    ingest.add_argument("--ray-address", help="with --engine ray: join this running cluster (default: start a local one)")
    ingest.add_argument(
        "--ray-workers", type=count, default=DEFAULT_WORKERS, help="with --engine ray: encoder actors (one CPU each)"
    )
    ingest.add_argument("--quiet", action="store_true", help="no progress bars")
    ingest.add_argument(
        "--strict",
        action="store_true",
        help="store nothing (exit 1) when a rule cannot fire for some record for want of a scope key, "
        "or a record_scope metadata field matches no record; the store is left as it was",
    )


def _run(args: argparse.Namespace) -> int:
    from car_rag.store import CARStore
    from car_rag.store.config import read_config

    if args.engine != "ray" and args.ray_address is not None:
        raise UsageError("--ray-address joins a Ray cluster for --engine ray")
    if args.engine == "ray":
        require("ray", "ray", "--engine ray")  # before the store is opened or created
        if args.precision != "fp32":
            raise UsageError("--engine ray embeds in fp32 (--precision fp16 is for --engine local)")
    if args.vector_store == "pgvector" and (args.authority_url is None or args.chroma_url is not None):
        raise UsageError(
            "--vector-store pgvector keeps the vectors in the store's PostgreSQL: give --authority-url, and no --chroma-url"
        )
    # on Ray, --device and --batch-size are the encoder actors' (a head node without a GPU may drive GPU actors)
    local = args.engine == "local"
    chosen = embedder(args, read_config(args.store) if args.authority_url is None else None, args.encoder) if local else None
    with CARStore.open(
        args.store,
        args.policy,
        chroma_url=args.chroma_url,
        bm25_backend=args.bm25_backend,
        encoder=None if chosen else args.encoder,
        embedder=chosen,
        vector_store=args.vector_store,
        **authority(args),
    ) as store:
        corpus: Any = args.corpus
        extracted = None
        if args.extract:
            from car_rag.extract import AuthorityExtractor

            extractor = AuthorityExtractor(
                store.policy, known=store.records.keys(), cache_dir=store.path / "scope-cache", max_chars=args.max_chars
            )
            extracted = extractor.extract(args.corpus)
            print_report(extracted, args.extract_report)
            print(f"{args.corpus}: extracted {extracted.summary()}")
            corpus = extracted.records
        elif args.extract_report is not None:
            raise UsageError("--extract-report needs --extract")
        if args.engine == "ray":
            from car_rag.store.distributed import ingest_on_ray

            report = ingest_on_ray(
                store,
                corpus,
                address=args.ray_address,
                workers=args.ray_workers,
                device=args.device,
                **({} if args.batch_size is None else {"batch_size": args.batch_size}),
                progress=not args.quiet,
                strict=args.strict,
                chunk_size=args.chunk_size,
            )
        else:
            report = store.ingest(corpus, progress=not args.quiet, strict=args.strict, chunk_size=args.chunk_size)
        if report.unchanged and (report.added or report.updated):  # a re-run after a crash, or an extended corpus
            print(f"{report.unchanged} records were already stored: skipped, not embedded again")
        for error in extracted.at_raw_lines(report.errors) if extracted is not None else report.errors:
            print(f"rejected: {error}", file=sys.stderr)
        problem = "error" if args.strict else "warning"
        for line in [str(m) for m in report.missing_scope] + report.warnings:
            print(f"{problem}: {line}", file=sys.stderr)
        print(f"{args.corpus}: {report.summary()}; store {store.location} holds {len(store)} records")
    return 1 if report.errors or report.strict_refused or (extracted is not None and extracted.errors) else 0


INGEST = Command(
    "ingest",
    "add or replace records in a store (idempotent by doc_id)",
    (
        "car-rag ingest corpus.jsonl --store ./store --policy security-advisory",
        "car-rag ingest more.jsonl --store ./store          # the store remembers its policy",
        "car-rag ingest raw.jsonl --store ./store --policy my-policy.toml --extract   # raw text: extract, then ingest",
        "CAR_RAG_AUTHORITY_URL=postgresql://... car-rag ingest corpus.jsonl --store ./cache --policy security-advisory "
        "--vector-store pgvector",
        "car-rag ingest corpus.parquet --store ./store --engine ray --ray-address 10.0.0.5:6379 --ray-workers 8",
    ),
    "Add or replace records in a store (idempotent by doc_id). Rejected records are named on stderr "
    "with file:line and the rest are stored; the exit status is then 1. The policy's [record_scope] "
    "extractors fill missing scope keys; each rule that still cannot fire for some record is named "
    "as a warning (with --strict: an error, and nothing is stored). Records are committed --chunk-size at a time: "
    "after a crash, the same command resumes, embedding only what was not committed. --engine ray embeds "
    "on a Ray cluster's actors instead of this process (docs/scale-out.md).",
    _arguments,
    _run,
)
