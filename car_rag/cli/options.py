"""Options more than one command takes, with one spelling and one meaning: the retriever's (``query``,
``serve``), the date and filter a query is asked under, and the shared store's location and the
device the embedding model runs on (``ingest``, ``query``, ``serve``)."""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from car_rag.cli.command import UsageError, confidence, count
from car_rag.embedding import DEVICE, PRECISIONS
from car_rag.resolution import DEFAULT_MIN_CONFIDENCE

if TYPE_CHECKING:
    from car_rag.eligibility import CallerContext, RecordFilter
    from car_rag.embedding import Embedder

AUTHORITY_URL_ENV = "CAR_RAG_AUTHORITY_URL"
"""Where --authority-url is read from when not given (a URL with a password stays off the command line)."""


def retriever_arguments(parser: argparse.ArgumentParser) -> None:
    """The retriever's options, as ``query`` and ``serve`` take them."""
    parser.add_argument("--k1", type=count, default=10, help="Stage-1 anchors")
    parser.add_argument("--depth", type=count, default=50, help="per-channel Stage-1 depth before fusion")
    parser.add_argument("--anchors", default="hybrid", choices=["bm25", "dense", "hybrid"], help="Stage-1 channels")
    parser.add_argument(
        "--fusion",
        default="calibrated",
        choices=["calibrated", "rrf"],
        help="calibrated: per-channel softmax over the query's scores; rrf: reciprocal rank fusion",
    )
    parser.add_argument(
        "--no-latent-scope",
        dest="latent_scope",
        action="store_false",
        help="take the top k1 fused hits as anchors (the paper's two-stage) instead of anchors that "
        "cover the probable scopes; records then carry no scope probability",
    )
    parser.add_argument(
        "--scope-tie-order",
        default="score",
        choices=["score", "state"],
        help="order of scopes the question cannot tell apart: score (Stage-1 score, then newest; the "
        "default) or state (a different current state first, the order before issue 30, kept only "
        "to measure it: it wins where a benchmark asks about the one changed scope among identical "
        "ones and loses where most changed)",
    )
    parser.add_argument(
        "--resolution",
        default="rules",
        choices=["rules", "timestamp"],
        help="rules: the policy's rules; timestamp: the paper's later-in-scope baseline",
    )
    parser.add_argument(
        "--min-confidence",
        type=confidence,
        default=DEFAULT_MIN_CONFIDENCE,
        help="τ: an edge voids only at this confidence or above; a record voided only by weaker edges "
        f"stays active, marked possibly superseded (default {DEFAULT_MIN_CONFIDENCE}: an edge voids "
        "once it is more likely true than false)",
    )


def retriever_options(args: argparse.Namespace) -> dict[str, Any]:
    """Keyword arguments of :class:`ControllingAuthorityRetriever` (but ``anchors``) from those options."""
    return {
        "k1": args.k1,
        "depth": max(args.depth, args.k1),
        "resolution": args.resolution,
        "fusion": args.fusion,
        "latent_scope": args.latent_scope,
        "scope_tie_order": args.scope_tie_order,
        "min_confidence": args.min_confidence,
    }


def point_in_time_arguments(parser: argparse.ArgumentParser) -> None:
    """``--as-of`` and the filters (``--since``, ``--until``, ``--filter``), as ``query`` takes them."""
    parser.add_argument(
        "--as-of",
        metavar="DATE",
        help="the authority as it stood on DATE (YYYY-MM-DD: its end; or an ISO 8601 time): records dated "
        "later (effective_at, else published_at) are not candidates and void nothing; undated records count at every date",
    )
    parser.add_argument("--since", metavar="DATE", help="only records dated on or after DATE (undated records are left out)")
    parser.add_argument("--until", metavar="DATE", help="only records dated on or before DATE (undated records are left out)")
    parser.add_argument(
        "--filter",
        action="append",
        metavar="KEY=VALUE",
        help="only records with KEY = VALUE (repeatable; one KEY given several values keeps any of them): KEY is "
        "doc_type, source, a scope key of the store's policy, or metadata.NAME (compared as text)",
    )


def point_in_time(args: argparse.Namespace, scope_keys: Sequence[str]) -> tuple[datetime | None, RecordFilter | None]:
    """The ``as_of`` and filter of those options (a usage error names a bad one)."""
    from car_rag.eligibility import filter_of, instant

    try:
        as_of = None if args.as_of is None else instant(args.as_of, "--as-of")
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    fields: dict[str, Any] = {}
    if args.since is not None or args.until is not None:
        fields["date_range"] = {"from": args.since, "to": args.until}
    for pair in args.filter or ():
        key, sep, value = pair.partition("=")
        if not sep or not key or not value:
            raise UsageError(f"--filter {pair}: expected KEY=VALUE")
        if key.startswith("metadata."):
            fields.setdefault("metadata", {})[key.removeprefix("metadata.")] = value
        elif key in ("doc_type", "source"):
            fields.setdefault(f"{key}s", []).append(value)
        elif key in scope_keys:
            fields.setdefault("subjects", {}).setdefault(key, []).append(value)
        else:
            raise UsageError(
                f"--filter {pair}: unknown filter field {key!r} (doc_type, source, metadata.NAME, or a scope key of "
                f"the store's policy: {', '.join(scope_keys)})"
            )
    try:
        found = filter_of(fields, scope_keys) if fields else None
    except ValueError as exc:
        # Named as the options spell it: date_range is --since/--until here.
        raise UsageError(
            str(exc)
            .replace("filters.date_range.from", "--since")
            .replace("filters.date_range.to", "--until")
            .replace("filters.date_range", "--since/--until")
        ) from None
    return as_of, found


def caller_arguments(parser: argparse.ArgumentParser) -> None:
    """``--tenant`` and ``--principal``: who a command reads the store as (the eligibility gate)."""
    parser.add_argument("--tenant", help="read the store as this tenant (eligibility gate)")
    parser.add_argument("--principal", action="append", help="read the store as this principal (repeatable)")


def caller(args: argparse.Namespace) -> CallerContext | None:
    """The reader :func:`caller_arguments` name; None when neither is given (unrestricted)."""
    from car_rag.eligibility import CallerContext

    if args.tenant is None and not args.principal:
        return None
    return CallerContext(args.tenant, frozenset(args.principal or ()))


def authority_arguments(parser: argparse.ArgumentParser) -> None:
    """Where a store shared by several processes keeps its records (``--authority-url``)."""
    parser.add_argument(
        "--authority-url",
        default=os.environ.get(AUTHORITY_URL_ENV) or None,
        help="a store shared by several processes: its records, edges and entity index in this PostgreSQL "
        f"database (postgresql://user:password@host:port/db; default: ${AUTHORITY_URL_ENV}, which "
        "keeps the password off the command line); --store is then a folder of this process's own",
    )
    parser.add_argument("--authority-schema", help="schema of the store in that database (default: car_rag)")


def authority(args: argparse.Namespace) -> dict[str, Any]:
    """The shared store's location, as CARStore.open takes it (both None for a store in a folder)."""
    if args.authority_url is None and args.authority_schema is not None:
        raise UsageError("--authority-schema names a schema of the PostgreSQL store: give --authority-url too")
    return {"authority_url": args.authority_url, "authority_schema": args.authority_schema}


def _device(text: str) -> str:
    if not DEVICE.fullmatch(text):
        raise argparse.ArgumentTypeError(f"must be cpu, cuda, cuda:N or mps, got {text!r}")
    return text


def embedder_arguments(parser: argparse.ArgumentParser) -> None:
    """Where and how the embedding model runs (``--device``, ``--batch-size``, ``--precision``)."""
    parser.add_argument(
        "--device",
        type=_device,
        default="cpu",
        help="where the embedding model runs: cpu, cuda or cuda:N (an NVIDIA GPU, on the torch encoder; needs a CUDA "
        "build of PyTorch) or mps (Apple's GPU). A store opened on another device than built it checks its probe "
        "vectors first",
    )
    parser.add_argument("--batch-size", type=count, help="texts the model embeds at a time (default 64)")
    parser.add_argument(
        "--precision",
        choices=list(PRECISIONS),
        default="fp32",
        help="fp16 halves the model's arithmetic on a GPU (not on CPU); a store takes it only where its probe "
        "vectors agree (cosine >= 0.9999) with those it was built with",
    )


def embedder(args: argparse.Namespace, config: Mapping[str, Any] | None, encoder: str | None = None) -> Embedder | None:
    """The embedder those options ask for, of the store's model (``config``: the store's configuration,
    None for a new store or one on PostgreSQL); None when they ask for the defaults, so the store
    makes its own as before. ``encoder`` (``--encoder``) defaults to the store's own on CPU."""
    options: dict[str, Any] = {"device": args.device, "precision": args.precision}
    if args.batch_size is not None:
        options["batch_size"] = args.batch_size
    if options == {"device": "cpu", "precision": "fp32"}:
        return None
    from car_rag.embedding import DEFAULT_MODEL, Embedder
    from car_rag.store import built_encoder

    if encoder is None and config is not None and args.device == "cpu":
        encoder = built_encoder(config)
    return Embedder(DEFAULT_MODEL if config is None else config["embedding_model"], encoder=encoder, **options)


def stage2_arguments(parser: argparse.ArgumentParser) -> None:
    """Where Stage 2 runs for a store on PostgreSQL: this process's memory, or SQL (``--stage2``)."""
    from car_rag.store.lean import STAGE2_MODES, STAGE2_SQL_ABOVE

    parser.add_argument(
        "--stage2",
        choices=STAGE2_MODES,
        default="auto",
        help="memory: hold the records and the authority graph in this process; sql: read each query's authority "
        "closure from the store's PostgreSQL (a store on pgvector, --authority-url), holding only BM25 and the scope "
        "values; auto: sql above --stage2-sql-above records (default: auto)",
    )
    parser.add_argument(
        "--stage2-sql-above",
        type=int,
        default=STAGE2_SQL_ABOVE,
        metavar="RECORDS",
        help="--stage2 auto serves a store on pgvector of more records than this with Stage 2 in SQL "
        f"(default: {STAGE2_SQL_ABOVE})",
    )
    parser.add_argument(
        "--stage2-bm25-folder",
        metavar="DIR",
        help="with Stage 2 in SQL, keep BM25 in this folder and read it memory-mapped, out of the process's heap "
        "(the same scores; built there by the first worker, mapped by the others; default: BM25 in memory)",
    )


def stage2(args: argparse.Namespace) -> dict[str, Any]:
    """``--stage2`` as :func:`~car_rag.store.lean.open_for_queries` takes it."""
    if args.stage2_sql_above < 0:
        raise UsageError(f"--stage2-sql-above must be 0 or more, got {args.stage2_sql_above}")
    return {"stage2": args.stage2, "sql_above": args.stage2_sql_above, "bm25_folder": args.stage2_bm25_folder}
