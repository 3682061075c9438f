"""``car-rag query``: the controlling records for one question (a table, JSON, or evidence for an
LLM), or for a JSONL query file (one JSON line per query)."""

from __future__ import annotations

import argparse
import json
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from car_rag.cli.command import Command, UsageError, count
from car_rag.cli.options import (
    authority,
    authority_arguments,
    caller,
    caller_arguments,
    embedder,
    embedder_arguments,
    point_in_time,
    point_in_time_arguments,
    retriever_arguments,
    retriever_options,
    stage2,
    stage2_arguments,
)
from car_rag.embedding import ENCODERS
from car_rag.evidence import HIDDEN_SUPERSEDER_TEXT
from car_rag.evidence.wording import FILTERED_SUPERSEDER_TEXT
from car_rag.store import CONFIG_FILE

if TYPE_CHECKING:
    from car_rag.embedding import Embedder
    from car_rag.evidence import EvidenceForm
    from car_rag.resolution import RetrievalResult, RetrievedRecord

__all__ = ["QUERY", "result_json"]

QUERY_BATCH = 256
"""Queries of a --queries file embedded together (ControllingAuthorityRetriever.retrieve_many)."""


FORMER_FORMATS = {"evidence": "plain", "xml": "audit"}
"""``--format`` values renamed in issue 31 (one evidence vocabulary), accepted for one release."""
RENDERED: dict[str, EvidenceForm] = {"plain": "plain", "reader": "reader", "audit": "audit", "evidence": "plain", "xml": "audit"}
"""``--format`` values that print a rendering, and the evidence form each is."""


def _print_table(result: RetrievalResult, k: int, out: TextIO) -> None:
    if result.as_of is not None:
        from car_rag.eligibility import as_of_label

        print(f"as of {as_of_label(result.as_of)}", file=out)
    if result.ambiguity is not None:
        from car_rag.evidence.wording import ambiguity_sentence

        print(f"ambiguous: {ambiguity_sentence(result.ambiguity, result.policy)}", file=out)
    shown = result.top(k)
    ids = {r.doc_id for r in shown}
    provenance = [r for r in result.superseded if r.doc_id not in ids and set(r.superseded_by) & ids]
    width = max([len(r.doc_id) for r in shown + provenance] + [6])
    print(f"{'#':>3}  {'status':<10}  {'doc_id':<{width}}  {'doc_type':<24}  {'stage1':>6}  {'scope p':>7}  why", file=out)
    for rec in shown + provenance:
        stage1 = str(rec.stage1.rank) if rec.stage1 else "-"
        scope_p = "-" if rec.scope_probability is None else f"{rec.scope_probability:.2f}"
        if rec.contested:
            why = "possibly superseded by " + ", ".join(
                f"{e.superseder} ({e.rule}, confidence {e.confidence:.2f})" for e in rec.contested_by
            )
        elif rec.voids:
            why = "supersedes " + ", ".join(f"{e.target} ({e.rule})" for e in rec.voids)
        elif rec.superseded_by:
            rules = sorted({e.rule for e in rec.voided_by})
            why = f"superseded by {', '.join(rec.superseded_by)} ({', '.join(rules)})"
        elif rec.hidden_superseder:
            why = HIDDEN_SUPERSEDER_TEXT
        elif rec.filtered_superseder:
            why = FILTERED_SUPERSEDER_TEXT
        else:
            why = rec.role
        rank = str(rec.rank) if rec in shown else "prov"
        print(
            f"{rank:>3}  {rec.status:<10}  {rec.doc_id:<{width}}  {rec.record.doc_type:<24}  {stage1:>6}  {scope_p:>7}  {why}",
            file=out,
        )
    timings = ", ".join(f"{name} {ms:.1f} ms" for name, ms in result.timings_ms.items())
    print(f"({timings})", file=out)


def _record_json(rec: RetrievedRecord, with_text: bool) -> dict[str, object]:
    data = rec.to_dict()
    if with_text:
        data["text"] = rec.record.text
    return data


def result_json(result: RetrievalResult, k: int, *, with_text: bool = False, query_id: str | None = None) -> dict[str, object]:
    """The one JSON shape of ``car-rag query`` (``--format json``; one such object per line with
    ``--queries``, led by its ``query_id``): :meth:`RetrievalResult.to_dict` with each record's
    text when ``with_text``."""
    data: dict[str, object] = {} if query_id is None else {"query_id": query_id}
    data.update(result.to_dict(k))
    data["records"] = [_record_json(rec, with_text) for rec in result.top(k)]
    return data


class _LoadingEmbedder:
    """The store's embedder with its model loading on a thread meanwhile: the model (ONNX Runtime,
    hashing its files) and the store (records, indexes) each take about half a second of a query's
    start, and the model's half mostly runs outside the GIL. :meth:`result` waits for it."""

    def __init__(self, embedder: Embedder):
        self.embedder = embedder
        self._thread = threading.Thread(target=self._load, name="car-rag-model", daemon=True)
        self._error: BaseException | None = None
        self._thread.start()

    def _load(self) -> None:
        try:
            self.embedder.model  # noqa: B018 - loads it
        except BaseException as exc:  # re-raised in the caller's thread by result()
            self._error = exc

    def result(self) -> Embedder:
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self.embedder


def _loading_embedder(config: dict[str, object], chosen: Embedder | None, encoder: str | None) -> _LoadingEmbedder:
    from car_rag.embedding import Embedder
    from car_rag.store import built_encoder

    return _LoadingEmbedder(chosen or Embedder(str(config["embedding_model"]), encoder=encoder or built_encoder(config)))


def _run(args: argparse.Namespace) -> int:
    from tqdm.auto import tqdm

    from car_rag.queries import load_queries
    from car_rag.retriever import ControllingAuthorityRetriever
    from car_rag.store.lean import open_for_queries

    if (args.text is None) == (args.queries is None):
        raise UsageError("give either a query text or --queries FILE.jsonl")
    if args.queries is None and args.out is not None:
        raise UsageError("--out goes with --queries (one query prints to stdout)")
    batch = args.queries is not None
    fmt = args.format or ("json" if batch else "table")
    if fmt in FORMER_FORMATS:
        print(
            f"car-rag query: --format {fmt} is deprecated and will be removed in the next release: use "
            f"--format {FORMER_FORMATS[fmt]}",
            file=sys.stderr,
        )
    if batch and fmt != "json":
        raise UsageError(f"--queries writes JSON lines (--format json); --format {fmt} renders one query text")
    if args.with_text and fmt != "json":
        raise UsageError("--with-text adds record texts to JSON output (--format json or --queries)")
    shared = args.authority_url is not None
    if not shared and not (args.store / CONFIG_FILE).is_file():
        raise FileNotFoundError(f"no car-rag store at {args.store}: run car-rag ingest first")
    reader = caller(args)
    config = None if shared else json.loads((args.store / CONFIG_FILE).read_text(encoding="utf-8"))
    chosen = embedder(args, config, args.encoder)  # a device that is not there is refused here
    loading = None if args.anchors == "bm25" or config is None else _loading_embedder(config, chosen, args.encoder)
    with open_for_queries(
        args.store,
        encoder=None if chosen or loading else args.encoder,
        embedder=loading.embedder if loading else chosen,
        follow=False,
        **authority(args),
        **stage2(args),
    ) as store:
        if loading is not None:
            loading.result()  # loaded while the store opened
        as_of, filters = point_in_time(args, store.policy.scope_keys)
        retriever = ControllingAuthorityRetriever(store, anchors=args.anchors, **retriever_options(args))
        if not batch:
            result = retriever.retrieve(args.text, caller=reader, as_of=as_of, filters=filters)
            if fmt == "json":
                print(json.dumps(result_json(result, args.k, with_text=args.with_text), indent=2, ensure_ascii=False))
            elif fmt in RENDERED:
                from car_rag.evidence import render

                print(render(result, RENDERED[fmt], policy=store.policy, k=args.k))
            else:
                _print_table(result, args.k, sys.stdout)
            return 0
        queries = load_queries(args.queries)
        out = open(args.out, "w", encoding="utf-8") if args.out else sys.stdout
        try:
            with tqdm(total=len(queries), desc="queries", unit="q", disable=args.out is None) as bar:
                for start in range(0, len(queries), QUERY_BATCH):  # batched embedding; lines written as they come
                    chunk = queries[start : start + QUERY_BATCH]
                    for query, result in zip(
                        chunk, retriever.retrieve_many([q.query for q in chunk], caller=reader, as_of=as_of, filters=filters)
                    ):
                        line = result_json(result, args.k, with_text=args.with_text, query_id=query.query_id)
                        print(json.dumps(line, ensure_ascii=False), file=out)
                    bar.update(len(chunk))
        finally:
            if out is not sys.stdout:
                out.close()
    return 0


def _arguments(query: argparse.ArgumentParser) -> None:
    query.add_argument("text", nargs="?", help="the question (or give --queries)")
    query.add_argument("--store", type=Path, required=True, help="store directory, made by car-rag ingest")
    query.add_argument("--queries", type=Path, help="JSONL query set (query_id, query); one JSON line out per query")
    query.add_argument("--out", type=Path, help="with --queries: write here instead of stdout")
    query.add_argument("--k", type=count, default=5, help="records to return")
    retriever_arguments(query)
    point_in_time_arguments(query)
    query.add_argument(
        "--format",
        choices=["table", "json", "plain", "reader", "audit", *FORMER_FORMATS],
        metavar="{table,json,plain,reader,audit}",
        help="json: records with status and edges; plain: what an LLM reads by default (the records "
        "as numbered plain documents); reader: the reader-first form (authority digest, packets); "
        "audit: the audit XML (default: table for a query text, json lines with --queries; "
        "evidence and xml, the former names of plain and audit, still work for one release)",
    )
    query.add_argument("--with-text", action="store_true", help="JSON output carries each record's text")
    query.add_argument(
        "--encoder",
        choices=list(ENCODERS),
        help="query encoder; must be the one the store was built with (default: the store's own)",
    )
    embedder_arguments(query)
    authority_arguments(query)
    stage2_arguments(query)
    caller_arguments(query)


QUERY = Command(
    "query",
    "retrieve the controlling records for a query or a query file",
    (
        'car-rag query --store ./store "Is lodash still vulnerable to CVE-2019-10744?" --k 5',
        'car-rag query --store ./store "..." --format json --with-text',
        "car-rag query --store ./store --queries questions.jsonl --out answers.jsonl",
        'car-rag query --store ./store "Is the ruling good law?" --as-of 2019-06-01 --filter source=ca9',
    ),
    "Retrieve the controlling records for one question (printed as a table, JSON, or evidence for an "
    "LLM) or for a JSONL query file (one JSON line per query, the same shape as --format json).",
    _arguments,
    _run,
)
