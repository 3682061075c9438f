"""The ``car-rag`` command line: ingest, query, demo, policies; bench, eval-llm and guard run
the evaluation harness (``car_rag_evals``), loaded only when one of them runs."""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, TextIO

from car_rag.channels.lexical import BACKENDS
from car_rag.evidence import HIDDEN_SUPERSEDER_TEXT
from car_rag.extras import MissingExtraError

if TYPE_CHECKING:
    from car_rag.eligibility import CallerContext
    from car_rag.resolution import RetrievalResult

__all__ = ["main"]


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


def _caller(args: argparse.Namespace) -> CallerContext | None:
    from car_rag.eligibility import CallerContext

    if args.tenant is None and not args.principal:
        return None
    return CallerContext(args.tenant, frozenset(args.principal or ()))


def _print_table(result: RetrievalResult, k: int, out: TextIO) -> None:
    shown = result.top(k)
    ids = {r.doc_id for r in shown}
    provenance = [r for r in result.superseded if r.doc_id not in ids and set(r.superseded_by) & ids]
    width = max([len(r.doc_id) for r in shown + provenance] + [6])
    print(f"{'#':>3}  {'status':<10}  {'doc_id':<{width}}  {'doc_type':<24}  {'stage1':>6}  why", file=out)
    for rec in shown + provenance:
        stage1 = str(rec.stage1.rank) if rec.stage1 else "-"
        if rec.voids:
            why = "supersedes " + ", ".join(f"{e.target} ({e.rule})" for e in rec.voids)
        elif rec.superseded_by:
            rules = sorted({e.rule for e in rec.voided_by})
            why = f"superseded by {', '.join(rec.superseded_by)} ({', '.join(rules)})"
        elif rec.hidden_superseder:
            why = HIDDEN_SUPERSEDER_TEXT
        else:
            why = rec.role
        rank = str(rec.rank) if rec in shown else "prov"
        print(f"{rank:>3}  {rec.status:<10}  {rec.doc_id:<{width}}  {rec.record.doc_type:<24}  {stage1:>6}  {why}", file=out)
    timings = ", ".join(f"{name} {ms:.1f} ms" for name, ms in result.timings_ms.items())
    print(f"({timings})", file=out)


def _cmd_ingest(args: argparse.Namespace) -> int:
    from car_rag.store import CARStore

    with CARStore.open(args.store, args.policy, chroma_url=args.chroma_url, bm25_backend=args.bm25_backend) as store:
        report = store.ingest(args.corpus, progress=not args.quiet)
        for error in report.errors:
            print(f"rejected: {error}", file=sys.stderr)
        print(f"{args.corpus}: {report.summary()}; store {args.store} holds {len(store)} records")
    return 1 if report.errors else 0


def _cmd_query(args: argparse.Namespace) -> int:
    from tqdm.auto import tqdm

    from car_rag.queries import load_queries
    from car_rag.retriever import ControllingAuthorityRetriever
    from car_rag.store import CARStore

    if (args.text is None) == (args.queries is None):
        raise SystemExit("car-rag query: give either a query text or --queries FILE.jsonl")
    caller = _caller(args)
    with CARStore.open(args.store) as store:
        retriever = ControllingAuthorityRetriever(
            store, anchors=args.anchors, k1=args.k1, depth=max(args.depth, args.k1), resolution=args.resolution
        )
        if args.text is not None:
            result = retriever.retrieve(args.text, caller=caller)
            if args.format == "json":
                print(json.dumps(result.to_dict(args.k), indent=2, ensure_ascii=False))
            elif args.format == "evidence":
                from car_rag.evidence import render_reader

                print(render_reader(result, policy=store.policy, k=args.k))
            elif args.format == "xml":
                from car_rag.evidence import render_xml

                print(render_xml(result, policy=store.policy, k=args.k))
            else:
                _print_table(result, args.k, sys.stdout)
            return 0
        queries = load_queries(args.queries)
        out = open(args.out, "w", encoding="utf-8") if args.out else sys.stdout
        try:
            for query in tqdm(queries, desc="queries", unit="q", disable=args.out is None):
                result = retriever.retrieve(query.query, caller=caller)
                line = {
                    "query_id": query.query_id,
                    "doc_ids": result.doc_ids(args.k),
                    "records": [
                        {"doc_id": r.doc_id, "status": r.status, "superseded_by": r.superseded_by}
                        for r in result.top(args.k)
                    ],
                    "timings_ms": result.timings_ms,
                }
                print(json.dumps(line, ensure_ascii=False), file=out)
        finally:
            if out is not sys.stdout:
                out.close()
    return 0


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
    bench = _harness("car_rag_evals.bench", "bench")
    suites = _harness("car_rag_evals.suites", "bench")

    if args.suite:
        suite = suites.load_suite(args.suite, args.corpora)
    elif args.corpus and args.queries and args.policy:
        suite = suites.custom_suite(args.corpus, args.queries, args.policy)
    else:
        raise SystemExit("car-rag bench: give --suite NAME, or --corpus, --queries and --policy")
    systems = tuple(args.systems.split(",")) if args.systems else bench.DEFAULT_SYSTEMS
    results = bench.run_suite(suite, k=args.k, systems=systems, stores_dir=args.stores, depth=args.depth)
    command = " ".join(["car-rag", *sys.argv[1:]]) if sys.argv[0].endswith("car-rag") else "car-rag bench ..."
    for path in bench.write_results(results, args.out, command):
        print(f"wrote {path}")
    print((args.out / f"{suite.name}.md").read_text())
    return 0


def _cmd_eval_llm(args: argparse.Namespace) -> int:
    llm = _harness("car_rag_evals.llm", "llm")

    if (args.answers is None) == (args.base_url is None):
        raise SystemExit("car-rag eval-llm: give --answers FILE.jsonl, or --base-url URL and --model NAME")
    if args.base_url and not args.model:
        raise SystemExit("car-rag eval-llm: --base-url needs --model")
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
    run_guard = _harness("car_rag_evals.guard_run", "bench").run_guard

    if (args.suite is None) == (args.corpus is None):
        raise SystemExit("car-rag guard: give --suite NAME, or --corpus, --queries and --policy")
    if args.corpus is not None and not (args.queries and args.policy):
        raise SystemExit("car-rag guard: --corpus needs --queries and --policy")
    command = " ".join(["car-rag", *sys.argv[1:]]) if sys.argv[0].endswith("car-rag") else "car-rag guard ..."
    paths = run_guard(
        args.answers, args.out, suite_name=args.suite, corpus=args.corpus, queries=args.queries, policy=args.policy,
        corpora_dir=args.corpora, stores_dir=args.stores, k=args.k, command=command,
    )
    for path in paths:
        print(f"wrote {path}")
    print((args.out / "summary.md").read_text())
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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="car-rag", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    ingest = sub.add_parser("ingest", help="add or replace records in a store (idempotent by doc_id)")
    ingest.add_argument("corpus", type=Path, help="JSONL corpus in the neutral record format")
    ingest.add_argument("--store", type=Path, required=True, help="store directory (created if missing)")
    ingest.add_argument("--policy", help="built-in policy name or .toml/.json file (needed to create a store)")
    ingest.add_argument("--chroma-url", help="keep vectors in a Chroma server, e.g. http://127.0.0.1:8000")
    ingest.add_argument("--bm25-backend", default="bm25-incremental", choices=list(BACKENDS))
    ingest.add_argument("--quiet", action="store_true", help="no progress bars")
    ingest.set_defaults(func=_cmd_ingest)

    query = sub.add_parser("query", help="retrieve the controlling records for a query or a query file")
    query.add_argument("text", nargs="?", help="the question")
    query.add_argument("--store", type=Path, required=True)
    query.add_argument("--queries", type=Path, help="JSONL query set (query_id, query); one JSON line out per query")
    query.add_argument("--out", type=Path, help="with --queries: write here instead of stdout")
    query.add_argument("--k", type=_count, default=5, help="records to return (default 5)")
    query.add_argument("--k1", type=_count, default=10, help="Stage-1 anchors (default 10)")
    query.add_argument("--depth", type=_count, default=50, help="per-channel Stage-1 depth before fusion")
    query.add_argument("--anchors", default="hybrid", choices=["bm25", "dense", "hybrid"])
    query.add_argument("--resolution", default="rules", choices=["rules", "timestamp"])
    query.add_argument("--format", default="table", choices=["table", "json", "evidence", "xml"],
                       help="evidence: the reader-first evidence an LLM reads; xml: the audit XML (default: %(default)s)")
    query.add_argument("--tenant", help="read as this tenant (eligibility gate)")
    query.add_argument("--principal", action="append", help="read as this principal (repeatable)")
    query.set_defaults(func=_cmd_query)

    demo = sub.add_parser("demo", help="dense-only vs BM25-only vs car-rag on the packaged demo corpus")
    demo.add_argument("--k", type=_count, default=5)
    demo.add_argument("--store", type=Path, help="keep the demo store here (default: a temporary directory)")
    demo.set_defaults(func=_cmd_demo)

    bench = sub.add_parser("bench", help="benchmark retrieval systems side by side on a suite")
    bench.add_argument("--suite", help="built-in suite (see car_rag_evals.suites.SUITES)")
    bench.add_argument("--corpus", type=Path, help="a user corpus (JSONL) instead of --suite")
    bench.add_argument("--queries", type=Path, help="its query set (JSONL, corpora format)")
    bench.add_argument("--policy", help="its policy (name or file)")
    bench.add_argument("--corpora", type=Path, help="folder of the built-in suites' files")
    bench.add_argument("--k", type=_count, default=5)
    bench.add_argument("--depth", type=_count, default=100, help="ranking depth for ranks and MRR")
    bench.add_argument("--systems", help="comma-separated subset of systems (default: all)")
    bench.add_argument("--stores", type=Path, default=Path(".car-stores"), help="where suite stores are kept and reused")
    bench.add_argument("--out", type=Path, default=Path("evals/results"))
    bench.set_defaults(func=_cmd_bench)

    evalllm = sub.add_parser("eval-llm", help="classify reader answers per retrieval condition (given, or from a chat server)")
    evalllm.add_argument("--suite", required=True, help="built-in suite (see car_rag_evals.suites.SUITES)")
    evalllm.add_argument("--answers", type=Path,
                         help="JSONL of query_id, condition, answer[, controlling_in_context]: classify only")
    evalllm.add_argument("--base-url",
                         help="OpenAI-compatible server, e.g. http://127.0.0.1:8080/v1 (key: $OPENAI_API_KEY or 'sk-local')")
    evalllm.add_argument("--model", help="model name on that server")
    evalllm.add_argument("--conditions",
                         help="comma-separated, of car_rag_evals.llm.CONDITIONS (default: its DEFAULT_CONDITIONS)")
    evalllm.add_argument("--k", type=_count, default=5, help="records in each context")
    evalllm.add_argument("--limit", type=_count, help="first N queries only")
    evalllm.add_argument("--query-ids", type=Path,
                         help="answer only these queries: a file with one query id per line ('#' comments)")
    evalllm.add_argument("--evidence-budget", type=float, default=1500,
                         help="each context fitted to this many tokens by leaving out whole records, "
                              "least useful first (default %(default)s)")
    evalllm.add_argument("--max-doc-chars", type=_count,
                         help="also cut each record's text to this many characters, in every condition (default: whole)")
    evalllm.add_argument("--max-tokens", type=_count, default=512, help="answer length cap per model call")
    evalllm.add_argument("--xml-form", choices=["compact", "full"], default="compact",
                         help="XML evidence rendering (render_xml compact=)")
    evalllm.add_argument("--concurrency", type=_count, default=4, help="model calls in flight")
    evalllm.add_argument("--timeout", type=float, default=120.0, help="seconds per model call")
    evalllm.add_argument("--retries", type=int, default=4, help="retries per model call")
    evalllm.add_argument("--cache", type=Path, help="answer cache JSONL (default OUT/cache.jsonl)")
    evalllm.add_argument("--corpora", type=Path, help="folder of the built-in suites' files")
    evalllm.add_argument("--stores", type=Path, default=Path(".car-stores"), help="where suite stores are kept and reused")
    evalllm.add_argument("--out", type=Path, required=True)
    evalllm.set_defaults(func=_cmd_eval_llm)

    guard = sub.add_parser("guard", help="check answers for consistency with the authority car-rag retrieves for their queries")
    guard.add_argument("--answers", type=Path, required=True, help="JSONL of query_id, condition, answer")
    guard.add_argument("--suite", help="built-in suite (see car_rag_evals.suites.SUITES)")
    guard.add_argument("--corpus", type=Path, help="a user corpus (JSONL) instead of --suite")
    guard.add_argument("--queries", type=Path, help="its query set (JSONL, corpora format)")
    guard.add_argument("--policy", help="its policy (name or file)")
    guard.add_argument("--k", type=_count, default=5, help="records the answers were given (default %(default)s)")
    guard.add_argument("--corpora", type=Path, help="folder of the built-in suites' files")
    guard.add_argument("--stores", type=Path, default=Path(".car-stores"), help="where suite stores are kept and reused")
    guard.add_argument("--out", type=Path, required=True)
    guard.set_defaults(func=_cmd_guard)

    policies = sub.add_parser("policies", help="list the built-in policies and their rules")
    policies.set_defaults(func=_cmd_policies)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    _quiet_runtime()
    args = build_parser().parse_args(argv)
    try:
        code: int = args.func(args)
        return code
    except (OSError, ValueError, RuntimeError, MissingExtraError) as exc:  # OSError: unreadable files as well as missing ones
        print(f"car-rag {args.command}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
