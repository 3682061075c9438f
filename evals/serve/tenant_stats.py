"""Per-tenant retrieval statistics (issue 32, item 2): does another tenant's data move a
tenant's ranking, and what do statistics over what the caller may read cost?

``invariance``: a public store (the demo corpus; a benchmark suite's store, copied) is read
by tenant ``acme``; tenant ``globex`` then adds 10,000 records of its own (the scale
benchmark's seeded security advisories: the same vocabulary, its own scope values so no
authority edge reaches a public record). Each question's top 5 for ``acme`` (the whole
pipeline's ranked records, the default retriever) is compared before and after, with the
store's BM25 as shipped (statistics over the caller's records) and, in the same run, with
the statistics of every stored record (how BM25 counted before: ``SharedStatistics``).

``cost``: 100,000 records over 10 tenants, each tenant's caller asking the scale benchmark's
questions; designs side by side in one process, interleaved query by query: today's shared
statistics, statistics counted at query time under the caller's mask (one index), and one
index per tenant; for bm25s, the reader index built over a mask's records. Memory of each
design by ``tracemalloc``; p50 of the lexical search (top 50).

    python evals/serve/tenant_stats.py invariance --suite ghsa-structured--security-advisory
    python evals/serve/tenant_stats.py cost --records 100000 --tenants 10
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
import tracemalloc
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from car_rag import CallerContext, CARStore, ControllingAuthorityRetriever, load_policy
from car_rag.channels import LexicalIndex, make_lexical_index
from car_rag.demo import demo_files
from car_rag.embedding import Embedder
from car_rag_evals.perf.corpus import generate, gist_vectors
from car_rag_evals.perf.stats import percentiles
from car_rag_evals.results_header import results_header

OUT = Path("evals/results/tenancy")
ACME = CallerContext("acme")
TOP = 5


class SharedStatistics(LexicalIndex):
    """The store's index scored with every stored record's statistics, the mask applied after
    scoring: how BM25 counted before issue 32 (the baseline the goal is measured against)."""

    backend = "shared-statistics"

    def __init__(self, held: Callable[[], LexicalIndex]) -> None:
        super().__init__()
        self._held = held

    @property
    def doc_ids(self) -> Sequence[str]:
        return self._held().doc_ids

    @doc_ids.setter
    def doc_ids(self, _value: Sequence[str]) -> None:
        pass  # the held index's ids are the ones read

    @property
    def generation(self) -> int:
        return self._held().generation

    @generation.setter
    def generation(self, _value: int) -> None:
        pass

    def build(self, doc_ids: Sequence[str], texts: Sequence[str]) -> None:
        raise NotImplementedError("reads the store's index")

    def scores(self, query: str, mask: np.ndarray | None = None) -> np.ndarray:
        return self._held().scores(query)

    def document_frequency(self, phrase: str, mask: np.ndarray | None = None) -> int:
        return self._held().document_frequency(phrase)

    def _save_body(self, folder: Path) -> None:
        raise NotImplementedError

    def _load_body(self, folder: Path) -> None:
        raise NotImplementedError


def _questions(path: Path) -> list[str]:
    return [json.loads(line)["query"] for line in path.read_text().splitlines() if line.strip()]


def _globex_records(count: int, embedder: Embedder) -> tuple[list[dict], dict[str, Any]]:
    """``count`` records of tenant globex, with vectors (each distinct gist encoded once)."""
    corpus = generate(count, seed=32, queries=0)
    vectors = gist_vectors(corpus, embedder, seed=32)
    records = []
    for r in corpus.records:
        ids: dict[str, Any] = {"doc_id": f"globex-{r['doc_id']}"}
        if r.get("supersedes"):
            ids["supersedes"] = [f"globex-{d}" for d in r["supersedes"]]
        scope = {k: f"globex-{v}" for k, v in r["scope"].items()}
        records.append({**r, **ids, "scope": scope, "tenant": "globex"})
    return records, {r["doc_id"]: v for r, v in zip(records, vectors)}


def _tops(store: CARStore, questions: list[str]) -> dict[str, dict[str, list[str]]]:
    """Each question's top 5 for acme, with the store's BM25 and with shared statistics."""
    shipped = ControllingAuthorityRetriever(store)
    shared = ControllingAuthorityRetriever(store, lexical=SharedStatistics(lambda: store.lexical))
    return {
        name: {q: [r.record.doc_id for r in retriever.retrieve(q, ACME).ranked[:TOP]] for q in questions}
        for name, retriever in (("caller statistics", shipped), ("shared statistics", shared))
    }


def invariance(args: argparse.Namespace) -> dict[str, Any]:
    embedder = Embedder()
    extra, vectors = _globex_records(args.added, embedder)
    work = Path(args.work)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    cases: list[tuple[str, CARStore, list[str]]] = []
    demo_corpus, demo_queries, demo_policy = demo_files()
    demo = CARStore.open(work / "demo", load_policy(demo_policy), embedder=embedder)
    demo.ingest(demo_corpus, progress=False)
    cases.append(("demo", demo, _questions(demo_queries)))
    shutil.copytree(Path(args.stores) / args.suite, work / args.suite)
    suite = CARStore.open(work / args.suite, embedder=embedder)
    corpus = args.suite.split("--")[0]
    cases.append((corpus, suite, _questions(Path(args.data) / f"{corpus}.queries.jsonl")))
    rows = []
    for name, store, questions in cases:
        before = _tops(store, questions)
        report = store.ingest(extra, embeddings=vectors, progress=False)
        assert len(report.added) == len(extra), report
        after = _tops(store, questions)
        for statistics in before:
            moved = [q for q in questions if before[statistics][q] != after[statistics][q]]
            rows.append(
                {
                    "corpus": name,
                    "statistics": statistics,
                    "questions": len(questions),
                    "top5_changed": len(moved),
                    "example": moved[0] if moved else None,
                    "records_before": len(store.records) - len(extra),
                    "records_added": len(extra),
                }
            )
        store.close()
    shutil.rmtree(work)
    return {
        "note": (
            f"acme's top 5 (whole pipeline, default retriever) per question, before and after globex adds {args.added:,} "
            "records; top5_changed counts questions whose top 5 (ids, in order) differ. 'shared statistics' is BM25 "
            "counted over every stored record (before issue 32), run beside the shipped one on the same stores."
        ),
        "rows": rows,
    }


def _memory(build: Callable[[], Any]) -> tuple[Any, float, float]:
    """What ``build`` returns, the MiB it holds (tracemalloc) and its seconds (tracemalloc on)."""
    tracemalloc.start()
    started = time.perf_counter()
    built = build()
    seconds = time.perf_counter() - started
    held = tracemalloc.get_traced_memory()[0] / 2**20
    tracemalloc.stop()
    return built, held, seconds


def cost(args: argparse.Namespace) -> dict[str, Any]:
    corpus = generate(args.records, seed=7, queries=args.queries)
    ids = [r["doc_id"] for r in corpus.records]
    texts = [r["text"] for r in corpus.records]
    tenant_of = np.arange(len(ids)) % args.tenants  # every record belongs to one tenant; none is public
    masks = [tenant_of == t for t in range(args.tenants)]

    def one(backend: str, keep: np.ndarray) -> LexicalIndex:
        index = make_lexical_index(backend)
        index.build([d for d, k in zip(ids, keep) if k], [t for t, k in zip(texts, keep) if k])
        return index

    everything = np.ones(len(ids), dtype=bool)
    incremental, inc_mb, inc_s = _memory(lambda: one("bm25-incremental", everything))
    per_tenant, per_mb, per_s = _memory(lambda: [one("bm25-incremental", m) for m in masks])
    bm25s, bm_mb, bm_s = _memory(lambda: one("bm25s", everything))
    # The bm25s reader indexes, built by the first query of each tenant (timed apart).
    _, reader_mb, reader_s = _memory(lambda: [bm25s.search("warm up", 1, mask=m) for m in masks])
    designs: dict[str, Callable[[str, int], list[str]]] = {
        "incremental, shared statistics (before)": lambda q, t: [
            h.doc_id for h in _shared_search(incremental, q, masks[t], args.depth)
        ],
        "incremental, caller statistics (shipped)": lambda q, t: [
            h.doc_id for h in incremental.search(q, args.depth, mask=masks[t])
        ],
        "incremental, one index per tenant": lambda q, t: [h.doc_id for h in per_tenant[t].search(q, args.depth)],
        "bm25s, shared statistics (before)": lambda q, t: [h.doc_id for h in _shared_search(bm25s, q, masks[t], args.depth)],
        "bm25s, reader index (shipped)": lambda q, t: [h.doc_id for h in bm25s.search(q, args.depth, mask=masks[t])],
    }
    timings: dict[str, list[float]] = {name: [] for name in designs}
    answers: dict[str, list[list[str]]] = {name: [] for name in designs}
    names = list(designs)
    for round_ in range(args.rounds):
        for i, query in enumerate(corpus.queries):
            tenant = (i + round_) % args.tenants
            for name in names[i % len(names) :] + names[: i % len(names)]:  # who goes first rotates
                started = time.perf_counter()
                top = designs[name](query.query, tenant)
                timings[name].append((time.perf_counter() - started) * 1000)
                if round_ == 0:
                    answers[name].append(top[:TOP])
    per_tenant_ids = answers["incremental, one index per tenant"]
    memory = {
        "incremental, shared statistics (before)": inc_mb,
        "incremental, caller statistics (shipped)": inc_mb,
        "incremental, one index per tenant": per_mb,
        "bm25s, shared statistics (before)": bm_mb,
        "bm25s, reader index (shipped)": bm_mb + reader_mb,
    }
    build = {
        "incremental, shared statistics (before)": inc_s,
        "incremental, caller statistics (shipped)": inc_s,
        "incremental, one index per tenant": per_s,
        "bm25s, shared statistics (before)": bm_s,
        "bm25s, reader index (shipped)": bm_s + reader_s,
    }
    return {
        "note": (
            "Milliseconds of one lexical search (top depth) for one tenant's caller, designs interleaved query by query; "
            "memory: MiB the design's indexes hold (tracemalloc; bm25s includes the corpus token ids now kept, and the "
            "reader index row adds the 10 tenants' reader indexes); build_s with tracemalloc on (the reader indexes: built "
            "by each tenant's first query); top5_as_per_tenant_index: of the first round's questions, those whose top 5 "
            "equals that of an index over the tenant's records alone."
        ),
        "records": args.records,
        "tenants": args.tenants,
        "queries": len(corpus.queries) * args.rounds,
        "depth": args.depth,
        "rows": [
            {
                "design": name,
                "memory_mib": round(memory[name], 1),
                "build_s": round(build[name], 2),
                **{k: round(v, 3) for k, v in percentiles(timings[name]).items() if k != "n"},
                "top5_as_per_tenant_index": sum(a == b for a, b in zip(answers[name], per_tenant_ids)),
            }
            for name in names
        ],
    }


def _shared_search(index: LexicalIndex, query: str, mask: np.ndarray, k: int) -> list[Any]:
    """Search with every record's statistics, the mask applied after scoring (before issue 32)."""
    return SharedStatistics(lambda: index).search(query, k, mask=mask)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="phase", required=True)
    inv = sub.add_parser("invariance", help="acme's top 5 before and after globex adds records")
    inv.add_argument("--suite", default="ghsa-structured--security-advisory", help="a store folder under --stores")
    inv.add_argument("--stores", default=".car-stores", help="benchmark stores (copied, never written)")
    inv.add_argument("--data", default="/work/shared/data/car-benchmarks/corpora", help="the suites' queries")
    inv.add_argument("--added", type=int, default=10_000, help="records globex adds")
    inv.add_argument("--work", default=".car-stores/tenant-stats-work", help="scratch folder (removed after)")
    cst = sub.add_parser("cost", help="memory and query p50 of the designs, side by side")
    cst.add_argument("--records", type=int, default=100_000)
    cst.add_argument("--tenants", type=int, default=10)
    cst.add_argument("--queries", type=int, default=200)
    cst.add_argument("--rounds", type=int, default=3)
    cst.add_argument("--depth", type=int, default=50, help="top k of the lexical search (the retriever's depth)")
    args = parser.parse_args()
    result = invariance(args) if args.phase == "invariance" else cost(args)
    header = results_header(__file__)
    result["command"] = header.command
    result["machine"] = {"python": header.python, "load_avg": list(header.load)}
    OUT.mkdir(parents=True, exist_ok=True)
    path = OUT / f"tenant-stats-{args.phase}.json"
    path.write_text(json.dumps(result, indent=2) + "\n")
    path.with_suffix(".md").write_text(_markdown(result))
    print(json.dumps(result, indent=2))


def _markdown(result: dict[str, Any]) -> str:
    """The rows as a table, under the command and the machine's load at the end of the run."""
    rows = result["rows"]
    head = list(rows[0])
    lines = [
        f"`{result['command']}` (load average at the end: {', '.join(f'{x:.1f}' for x in result['machine']['load_avg'])})",
        "",
        "| " + " | ".join(head) + " |",
        "|" + "---|" * len(head),
    ]
    lines[1:1] = ["", result["note"]] if "note" in result else []
    lines += ["| " + " | ".join(str(row[k]) for k in head) + " |" for row in rows]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
