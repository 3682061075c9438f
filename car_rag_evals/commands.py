"""The harness's ``car-rag`` commands: bench, eval-llm, guard, report, fanin. Each is a
:class:`car_rag.cli.command.Command` that ``car-rag`` finds through an entry point of the group
``car_rag.commands`` (pyproject.toml), so the core never imports the harness. Building the parser
imports only this module; a command loads the harness modules it runs when it runs."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from car_rag.cli.command import Command, UsageError, count

__all__ = ["BENCH", "EVAL_LLM", "GUARD", "REPORT", "FANIN"]

QUERY_FORMAT = "query_id, query, gold_doc_ids, anchor_doc_ids, chain_doc_ids oldest first, ...; see docs/bench-queries.md"
"""A labelled query set's fields, and where its format is written down (bench, report)."""


def _command_line(name: str) -> str:
    """The command line a run's results record (``car-rag bench …``, as typed when run by the script)."""
    return " ".join(["car-rag", *sys.argv[1:]]) if sys.argv[0].endswith("car-rag") else f"car-rag {name} ..."


def _corpora(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--corpora", type=Path, help="folder of the built-in suites' files (default: found beside the checkout)")


def _stores(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--stores", type=Path, default=Path(".car-stores"), help="where suite stores are kept and reused")


def _model_options(parser: argparse.ArgumentParser, cache_default: str, purpose: str = "") -> None:
    """The chat-model options ``eval-llm`` and ``bench --ablation`` share: one spelling, one meaning."""
    parser.add_argument(
        "--base-url",
        help=f"{purpose}OpenAI-compatible server, e.g. http://127.0.0.1:8080/v1 (key: $OPENAI_API_KEY or 'sk-local')",
    )
    parser.add_argument("--model", help="model name on that server")
    parser.add_argument("--max-tokens", type=count, default=512, help="answer length cap per model call")
    parser.add_argument("--concurrency", type=count, default=4, help="model calls in flight")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds per model call")
    parser.add_argument("--retries", type=int, default=4, help="retries per model call")
    parser.add_argument("--cache", type=Path, help=f"answer cache JSONL, keyed by model and prompt (default: {cache_default})")


# ---------------------------------------------------------------------- bench
def _bench_arguments(bench: argparse.ArgumentParser) -> None:
    bench.add_argument("--suite", help="built-in suite (see car_rag_evals.suites.SUITES)")
    bench.add_argument("--corpus", type=Path, help="a user corpus (JSONL) instead of --suite")
    bench.add_argument("--queries", type=Path, help=f"its query set (JSONL: {QUERY_FORMAT})")
    bench.add_argument("--policy", help="its policy (name or file)")
    _corpora(bench)
    bench.add_argument("--k", type=count, default=5, help="top-k scored")
    bench.add_argument("--depth", type=count, default=100, help="ranking depth for ranks and MRR")
    bench.add_argument("--systems", help="comma-separated subset of systems (default: all)")
    bench.add_argument(
        "--ablation",
        action="store_true",
        help="the legal-RAG ablation matrix V0-V9 and car-rag's stages instead (SUITE-ablation.json/.md)",
    )
    _model_options(bench, "OUT/SUITE-ablation.cache.jsonl", "with --ablation: the query rewrite and HyDE variants' ")
    _stores(bench)
    bench.add_argument("--out", type=Path, default=Path("evals/results"), help="results folder")


def _bench(args: argparse.Namespace) -> int:
    if not args.suite and not (args.corpus and args.queries and args.policy):
        raise UsageError("give --suite NAME, or --corpus, --queries and --policy")
    if args.base_url and not args.ablation:
        raise UsageError("--base-url is for --ablation (its query rewrite and HyDE variants)")
    if args.base_url and not args.model:
        raise UsageError("--base-url needs --model")
    from car_rag_evals import bench, suites

    if args.suite:
        suite = suites.load_suite(args.suite, args.corpora)
    else:
        suite = suites.custom_suite(args.corpus, args.queries, args.policy)
    command = _command_line("bench")
    if args.ablation:
        from car_rag_evals import ablation

        client = None
        if args.base_url:
            from car_rag_evals import llm

            cache = llm.AnswerCache(args.cache or args.out / f"{suite.name}-ablation.cache.jsonl")
            client = llm.ChatClient(
                args.base_url, args.model, cache=cache, timeout=args.timeout, max_retries=args.retries, max_tokens=args.max_tokens
            )
        result = ablation.run_ablation(
            suite, stores_dir=args.stores, depth=args.depth, client=client, concurrency=args.concurrency
        )
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


BENCH = Command(
    "bench",
    "benchmark retrieval systems side by side on a suite",
    (
        "car-rag bench --suite ghsa-freeform --k 5 --out evals/results",
        "car-rag bench --suite ghsa-freeform --ablation --base-url http://127.0.0.1:8080/v1 --model NAME",
        "car-rag bench --corpus corpus.jsonl --queries queries.jsonl --policy security-advisory --out runs/mine",
    ),
    arguments=_bench_arguments,
    run=_bench,
)


# ---------------------------------------------------------------------- eval-llm
def _eval_llm_arguments(evalllm: argparse.ArgumentParser) -> None:
    evalllm.add_argument("--suite", required=True, help="built-in suite (see car_rag_evals.suites.SUITES)")
    evalllm.add_argument(
        "--answers", type=Path, help="JSONL of query_id, condition, answer[, controlling_in_context]: classify only"
    )
    _model_options(evalllm, "OUT/cache.jsonl")
    evalllm.add_argument(
        "--conditions", help="comma-separated, of car_rag_evals.llm.CONDITIONS (default: its DEFAULT_CONDITIONS)"
    )
    evalllm.add_argument("--k", type=count, default=5, help="records in each context")
    evalllm.add_argument("--limit", type=count, help="first N queries only (default: all)")
    evalllm.add_argument(
        "--query-ids", type=Path, help="answer only these queries: a file with one query id per line ('#' comments)"
    )
    evalllm.add_argument(
        "--evidence-budget",
        type=float,
        default=1500,
        help="each context fitted to this many tokens by leaving out whole records, least useful first",
    )
    evalllm.add_argument(
        "--max-doc-chars",
        type=count,
        help="also cut each record's text to this many characters, in every condition (default: whole)",
    )
    evalllm.add_argument(
        "--audit-layout",
        "--xml-form",
        dest="audit_layout",
        choices=["compact", "full"],
        default="compact",
        help="layout of the audit XML in the car-audit conditions (render(..., 'audit', compact=...)); "
        "--xml-form is its former name, accepted for one release",
    )
    _corpora(evalllm)
    _stores(evalllm)
    evalllm.add_argument("--out", type=Path, required=True, help="run folder: report, labels, answers, cache")


def _eval_llm(args: argparse.Namespace) -> int:
    if (args.answers is None) == (args.base_url is None):
        raise UsageError("give --answers FILE.jsonl, or --base-url URL and --model NAME")
    if args.base_url and not args.model:
        raise UsageError("--base-url needs --model")
    from car_rag_evals import llm

    query_ids = None
    if args.query_ids is not None:
        lines = args.query_ids.read_text(encoding="utf-8").splitlines()
        query_ids = [line.strip() for line in lines if line.strip() and not line.lstrip().startswith("#")]
    options = (
        {}
        if args.answers
        else {
            "k": args.k,
            "limit": args.limit,
            "query_ids": query_ids,
            "stores_dir": args.stores,
            "concurrency": args.concurrency,
            "timeout": args.timeout,
            "max_retries": args.retries,
            "cache": args.cache,
            "evidence_budget": args.evidence_budget,
            "max_doc_chars": args.max_doc_chars,
            "max_tokens": args.max_tokens,
            "audit_layout": args.audit_layout,
        }
    )
    conditions = tuple(args.conditions.split(",")) if args.conditions else llm.DEFAULT_CONDITIONS
    paths = llm.run_eval_llm(
        args.suite,
        args.out,
        answers=args.answers,
        base_url=args.base_url,
        model=args.model,
        conditions=conditions,
        corpora_dir=args.corpora,
        command=_command_line("eval-llm"),
        **options,
    )
    for path in paths:
        print(f"wrote {path}")
    print((args.out / "report.md").read_text())
    return 0


EVAL_LLM = Command(
    "eval-llm",
    "classify reader answers per retrieval condition (given, or from a chat server)",
    (
        "car-rag eval-llm --suite ghsa-freeform --base-url http://127.0.0.1:8080/v1 --model NAME --out runs/ghsa",
        "car-rag eval-llm --suite ghsa-freeform --answers my_answers.jsonl --out runs/mine",
    ),
    arguments=_eval_llm_arguments,
    run=_eval_llm,
)


# ---------------------------------------------------------------------- guard
def _guard_arguments(guard: argparse.ArgumentParser) -> None:
    guard.add_argument("--answers", type=Path, required=True, help="JSONL of query_id, condition, answer")
    guard.add_argument("--suite", help="built-in suite (see car_rag_evals.suites.SUITES)")
    guard.add_argument("--corpus", type=Path, help="a user corpus (JSONL) instead of --suite")
    guard.add_argument("--queries", type=Path, help="its query set (JSONL, corpora format)")
    guard.add_argument("--policy", help="its policy (name or file)")
    guard.add_argument(
        "--evidence",
        type=Path,
        help="JSONL of what each answer was generated from: query_id, condition, and records (doc ids or "
        "record objects), context_doc_ids (an eval-llm answers.jsonl) or the rendered text; answers "
        "without it are judged against a re-retrieval over the whole scopes of its top --k",
    )
    guard.add_argument("--k", type=count, default=5, help="records the answers were given, where --evidence does not say")
    _corpora(guard)
    _stores(guard)
    guard.add_argument("--out", type=Path, required=True, help="folder for guard.jsonl and the summary")


def _guard(args: argparse.Namespace) -> int:
    if (args.suite is None) == (args.corpus is None):
        raise UsageError("give --suite NAME, or --corpus, --queries and --policy")
    if args.corpus is not None and not (args.queries and args.policy):
        raise UsageError("--corpus needs --queries and --policy")
    from car_rag_evals.guard_run import run_guard

    paths = run_guard(
        args.answers,
        args.out,
        suite_name=args.suite,
        corpus=args.corpus,
        queries=args.queries,
        policy=args.policy,
        corpora_dir=args.corpora,
        stores_dir=args.stores,
        k=args.k,
        evidence=args.evidence,
        command=_command_line("guard"),
    )
    for path in paths:
        print(f"wrote {path}")
    print((args.out / "summary.md").read_text())
    return 0


GUARD = Command(
    "guard",
    "check answers for consistency with the authority behind the evidence they were given",
    (
        "car-rag guard --suite ghsa-freeform --answers answers.jsonl --evidence answers.jsonl --out runs/guard",
        "car-rag guard --suite ghsa-freeform --answers answers.jsonl --out runs/guard",
        "car-rag guard --corpus corpus.jsonl --queries queries.jsonl --policy security-advisory "
        "--answers answers.jsonl --out runs/guard",
    ),
    arguments=_guard_arguments,
    run=_guard,
)


# ---------------------------------------------------------------------- report
def _report_arguments(report: argparse.ArgumentParser) -> None:
    report.add_argument("run_dir", type=Path, metavar="RUN_DIR", help="a bench result (JSON or folder), or an eval-llm folder")
    report.add_argument("--out", type=Path, help="the HTML file (default: RUN_DIR/report.html)")
    report.add_argument("--suite", help="which bench result in RUN_DIR; an eval-llm folder's suite if report.json is gone")
    report.add_argument("--corpus", type=Path, help="a user corpus (JSONL), for a run on one")
    report.add_argument("--queries", type=Path, help=f"its query set (JSONL: {QUERY_FORMAT})")
    report.add_argument("--policy", help="its policy (name or file)")
    report.add_argument("--no-evidence", action="store_true", help="leave out the rendered evidence (smaller, faster)")
    _corpora(report)
    _stores(report)


def _report(args: argparse.Namespace) -> int:
    if args.corpus is not None and not (args.queries and args.policy):
        raise UsageError("--corpus needs --queries and --policy")
    from car_rag_evals import report
    from car_rag_evals.suites import custom_suite

    suite = custom_suite(args.corpus, args.queries, args.policy, args.suite) if args.corpus else None
    out = args.out or (args.run_dir if args.run_dir.is_dir() else args.run_dir.parent) / "report.html"
    path = report.build_report(
        args.run_dir,
        out,
        suite_name=args.suite,
        suite=suite,
        corpora_dir=args.corpora,
        stores_dir=args.stores,
        evidence=not args.no_evidence,
    )
    print(f"wrote {path} ({path.stat().st_size / 1e6:.1f} MB)")
    return 0


REPORT = Command(
    "report",
    "one self-contained HTML page for a bench or eval-llm run: overview, per-query drill-down",
    (
        "car-rag report evals/results --suite ghsa-freeform --out evals/results/report/ghsa-freeform.html",
        "car-rag report evals/results/llm-ghsa-freeform",
    ),
    arguments=_report_arguments,
    run=_report,
)


# ---------------------------------------------------------------------- fanin
def _fanin_arguments(fanin: argparse.ArgumentParser) -> None:
    fanin.add_argument("result", type=Path, metavar="BENCH_JSON", help="a bench result (with top-k ids per query)")
    fanin.add_argument("--reader", type=Path, help="an eval-llm folder on the same suite: recall-correctness correlation")
    _corpora(fanin)
    fanin.add_argument("--out", type=Path, default=Path("evals/results/fanin"), help="folder for SUITE-fanin.json/.md")


def _fanin(args: argparse.Namespace) -> int:
    from car_rag_evals import fanin

    result = fanin.run_fanin(args.result, reader_dir=args.reader, corpora_dir=args.corpora, command=_command_line("fanin"))
    args.out.mkdir(parents=True, exist_ok=True)
    stem = args.out / f"{result['suite']}-fanin"
    stem.with_suffix(".json").write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    stem.with_suffix(".md").write_text(fanin.markdown(result), encoding="utf-8")
    print(fanin.markdown(result))
    return 0


FANIN = Command(
    "fanin",
    "evidence recall and precision of each system's top k against the chain, by fan-in",
    ("car-rag fanin evals/results/ghsa-freeform.json --reader evals/results/llm-ghsa-freeform",),
    arguments=_fanin_arguments,
    run=_fanin,
)
