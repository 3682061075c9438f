"""Options more than one command takes, with one spelling and one meaning: the retriever's (``query``,
``serve``) and the shared store's location (``ingest``, ``query``, ``serve``)."""

from __future__ import annotations

import argparse
import os
from typing import Any

from car_rag.cli.command import UsageError, confidence, count
from car_rag.resolution import DEFAULT_MIN_CONFIDENCE

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
