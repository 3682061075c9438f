"""``car-rag mcp``: car-rag's ``retrieve`` and ``explain`` as MCP tools over stdio (:mod:`car_rag.mcp_server`,
loaded only when the command runs)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from car_rag.cli.command import Command, UsageError, count, positive
from car_rag.cli.options import authority, authority_arguments, caller, caller_arguments, retriever_arguments, retriever_options
from car_rag.extras import require

__all__ = ["MCP", "API_KEY_ENV"]

API_KEY_ENV = "CAR_RAG_API_KEY"
"""Where ``car-rag mcp --url`` reads the server's API key (a key on the command line is in every ``ps``)."""


def _run(args: argparse.Namespace) -> int:
    if (args.store is None) == (args.url is None):
        raise UsageError("give either --store (a store this process opens) or --url (a car-rag serve)")
    if args.url is not None and (args.tenant is not None or args.principal):
        raise UsageError("--tenant/--principal read a store as that caller; a car-rag serve takes the caller from its API key")
    require("mcp.server.mcpserver", "mcp", "car-rag mcp")
    from car_rag.mcp_server import build_server

    if args.url is not None:
        from car_rag.client import CARServiceClient

        with CARServiceClient(args.url, api_key=os.environ.get(API_KEY_ENV) or None, timeout_s=args.timeout_s) as client:
            build_server(client, default_k=args.k).run("stdio")
        return 0
    from car_rag.retriever import ControllingAuthorityRetriever
    from car_rag.store import CONFIG_FILE, CARStore

    if args.authority_url is None and not (args.store / CONFIG_FILE).is_file():
        raise FileNotFoundError(f"no car-rag store at {args.store}: run car-rag ingest first")

    with CARStore.open(args.store, follow=False, **authority(args)) as store:
        retriever = ControllingAuthorityRetriever(store, anchors=args.anchors, **retriever_options(args))
        build_server(retriever, caller=caller(args), default_k=args.k).run("stdio")
    return 0


def _arguments(mcp: argparse.ArgumentParser) -> None:
    mcp.add_argument("--store", type=Path, help="store directory, made by car-rag ingest")
    mcp.add_argument(
        "--url",
        help=f"instead of --store: a car-rag serve (its API key from ${API_KEY_ENV}): retrieve and explain ask it",
    )
    mcp.add_argument("--k", type=count, default=5, help="records retrieve returns when the agent does not say")
    mcp.add_argument("--timeout-s", type=positive, default=30.0, help="with --url: how long the server may take to answer")
    retriever_arguments(mcp)
    authority_arguments(mcp)
    caller_arguments(mcp)


MCP = Command(
    "mcp",
    "serve retrieve and explain as MCP tools over stdio (needs car-rag[mcp])",
    (
        "car-rag mcp --store ./store",
        "car-rag mcp --store ./store --tenant acme --principal analyst",
        "CAR_RAG_API_KEY=... car-rag mcp --url http://127.0.0.1:8000",
    ),
    "Serve car-rag to an MCP client (Claude Desktop, an agent framework) over stdio, with the official MCP SDK. "
    "Tools: retrieve(query, k) returns the plain evidence, each record with its status and what voids it; "
    "explain(doc_id) returns a record's authority chain (who voids it, by which rule, up to the active "
    "records), as JSON. Over a store, records are read as --tenant/--principal (default: unrestricted); "
    "with --url the tools ask a car-rag serve (/retrieve, /explain), which reads as its API key allows.",
    _arguments,
    _run,
)
