"""``car-rag serve``: a store over HTTP (:mod:`car_rag.serve`, loaded only when the command runs)."""

from __future__ import annotations

import argparse
import ipaddress
import sys
from pathlib import Path

from car_rag.cli.command import Command, UsageError, count, non_negative, positive
from car_rag.cli.options import (
    authority,
    authority_arguments,
    embedder,
    embedder_arguments,
    retriever_arguments,
    retriever_options,
    stage2,
    stage2_arguments,
)
from car_rag.extras import require
from car_rag.serve import INSERT_WINDOW_MS
from car_rag.store import CONFIG_FILE

__all__ = ["SERVE", "UNRESTRICTED_WARNING"]

UNRESTRICTED_WARNING = (
    "car-rag serve: WARNING: no --api-keys: every client reads every record and may write records. "
    "Serve on loopback only, or behind a proxy that authenticates; pass --api-keys FILE for tenancy."
)


def _run(args: argparse.Namespace) -> int:
    shared = args.authority_url is not None
    if args.workers != 1 and not shared:
        raise UsageError(
            f"--workers {args.workers}: a store in a folder has one owning process (its graph and BM25 index live in "
            "that process's memory, and it saves them); several workers serve a store shared through PostgreSQL "
            "(--authority-url), or one worker answers queries and inserts from many threads"
        )
    for module in ("fastapi", "uvicorn", "prometheus_client"):
        require(module, "serve", "car-rag serve")
    import uvicorn

    from car_rag.serve.app import create_app
    from car_rag.serve.keys import load_api_keys
    from car_rag.serve.service import Service
    from car_rag.serve.workers import WorkerSettings, run_workers
    from car_rag.store.config import read_config
    from car_rag.store.lean import open_for_queries

    loopback = _is_loopback(args.host)
    if args.api_keys is None and not loopback and not args.insecure:
        raise UsageError(
            f"--host {args.host}: a server without --api-keys lets every client read and write every record; it "
            "listens on loopback only, unless told --insecure (behind a proxy that authenticates)"
        )
    keys = load_api_keys(args.api_keys) if args.api_keys is not None else None  # a bad file fails here, not in a worker
    if not shared and not (args.store / CONFIG_FILE).is_file():
        raise FileNotFoundError(f"no car-rag store at {args.store}: run car-rag ingest first")
    chosen = embedder(args, None if shared else read_config(args.store))  # a device that is not there is refused here
    if keys is None:
        print(UNRESTRICTED_WARNING, file=sys.stderr)
    log_level = "info" if args.verbose else "warning"
    app_options = {
        "max_body_bytes": int(args.max_body_mb * 2**20),
        "body_timeout_s": args.body_timeout_s,
        "allowed_hosts": _allowed_hosts(args, keyed=keys is not None, loopback=loopback),
        "public_metrics": args.public_metrics,
        "public_docs": args.public_docs,
    }
    if args.workers != 1:
        settings = WorkerSettings(
            store=str(args.store),
            authority_url=args.authority_url,
            authority_schema=args.authority_schema,
            api_keys=None if args.api_keys is None else str(args.api_keys.resolve()),
            timeout_ms=args.timeout_ms,
            insert_window_ms=args.insert_window_ms,
            anchors=args.anchors,
            retriever_options=retriever_options(args),
            chroma_timeout_s=args.chroma_timeout_s,
            stage2=stage2(args),
            app_options=app_options,
            embedder_options={"device": args.device, "precision": args.precision, "batch_size": chosen.batch_size}
            if chosen
            else {},
        )
        run_workers(settings, host=args.host, port=args.port, workers=args.workers, log_level=log_level)
        return 0
    scopes = None if keys is None else keys.publisher_scopes
    with open_for_queries(
        args.store,
        embedder=chosen,
        chroma_timeout_s=args.chroma_timeout_s,
        publisher_scopes=scopes,
        **authority(args),
        **stage2(args),
    ) as store:
        service = Service(
            store,
            api_keys=keys,
            timeout_ms=args.timeout_ms,
            insert_window_ms=args.insert_window_ms,
            anchors=args.anchors,
            **retriever_options(args),
        )
        app = create_app(service, **app_options)
        uvicorn.run(app, host=args.host, port=args.port, log_level=log_level)
    return 0


def _is_loopback(host: str) -> bool:
    """Whether ``--host`` listens on this machine's loopback only."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:  # a name: it may resolve to any address
        return False


def _allowed_hosts(args: argparse.Namespace, *, keyed: bool, loopback: bool) -> list[str] | None:
    """The ``Host`` names the server answers to: without keys, or off loopback, this machine's
    loopback names, the address it listens on and each --allowed-host (a page that rebinds its own
    name to 127.0.0.1 sends its own name); a server with keys on loopback, any unless told."""
    if keyed and loopback and not args.allowed_host:
        return None
    wildcard = args.host in ("0.0.0.0", "::", "")
    return ["localhost", "127.0.0.1", "::1", *([] if wildcard else [args.host.strip("[]")]), *args.allowed_host]


def _arguments(serve: argparse.ArgumentParser) -> None:
    serve.add_argument("--store", type=Path, required=True, help="store directory, made by car-rag ingest")
    serve.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to listen on (without --api-keys: a loopback address, unless --insecure)",
    )
    serve.add_argument(
        "--insecure",
        action="store_true",
        help="let a server without --api-keys listen off loopback (behind a proxy that authenticates)",
    )
    serve.add_argument(
        "--allowed-host",
        action="append",
        default=[],
        metavar="NAME",
        help="a Host name clients reach the server by (repeat it); without keys or off loopback, requests for "
        "any other Host are refused (DNS rebinding); localhost and the --host address are always allowed",
    )
    serve.add_argument(
        "--public-metrics",
        action="store_true",
        help="with --api-keys: answer /metrics and the detail of /readyz without a key (default: a key is needed)",
    )
    serve.add_argument(
        "--public-docs",
        action="store_true",
        help="with --api-keys: answer /docs and /openapi.json without a key (default: a key is needed)",
    )
    serve.add_argument("--port", type=int, default=8000, help="port to listen on")
    serve.add_argument(
        "--workers",
        type=count,
        default=1,
        help="server processes (more than 1 needs a store shared through PostgreSQL, --authority-url)",
    )
    authority_arguments(serve)
    stage2_arguments(serve)
    serve.add_argument(
        "--api-keys",
        type=Path,
        help="TOML or JSON keys file: each key's SHA-256, tenant, principals, write (default: no keys, "
        "every client reads everything)",
    )
    serve.add_argument("--timeout-ms", type=positive, default=2000.0, help="deadline of a /retrieve request")
    serve.add_argument(
        "--chroma-timeout-s",
        type=positive,
        default=30.0,
        help="bound on each call to a Chroma server (a store made with --chroma-url)",
    )
    serve.add_argument("--max-body-mb", type=positive, default=16.0, help="larger request bodies are refused (413)")
    serve.add_argument(
        "--body-timeout-s",
        type=positive,
        default=30.0,
        help="a request body not received whole within this many seconds is refused (408) and its connection closed",
    )
    serve.add_argument(
        "--insert-window-ms",
        type=non_negative,
        default=INSERT_WINDOW_MS,
        help="POST /records arriving this close together are stored by one ingest, each still all or "
        "nothing (0: one ingest per request)",
    )
    embedder_arguments(serve)
    retriever_arguments(serve)


SERVE = Command(
    "serve",
    "answer /retrieve and /records over HTTP (needs car-rag[serve])",
    (
        "car-rag serve --store ./store --api-keys keys.toml",
        "car-rag serve --store ./store --port 8080 --timeout-ms 500 --anchors bm25",
        "CAR_RAG_AUTHORITY_URL=postgresql://... car-rag serve --store ./cache --workers 2 --api-keys keys.toml",
    ),
    "Serve a store over HTTP (FastAPI + uvicorn): POST /retrieve, POST /records, GET /healthz, /readyz, /metrics; "
    "OpenAPI at /docs. With --api-keys each request's key decides its tenant and principals (401 without one, "
    "before the body is read; /metrics, /readyz's detail and /docs need one too unless --public-metrics / "
    "--public-docs); without it the server is unrestricted and listens on loopback only unless --insecure. "
    "Cross-site browser requests, bodies that are not JSON and Host names not allowed are refused. A dense "
    "channel slower than 3/4 of --timeout-ms is left out of the answer, which says so (diagnostics.degraded).",
    _arguments,
    _run,
)
