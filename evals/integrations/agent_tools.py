"""How many superseded documents reach an agent unmarked, through each retrieval-tool path.

An agent reads a retrieval tool's output, not car-rag's order. A superseded document reaches
it *unmarked* when its text is in the tool's output and nothing between the previous
document's text and its own says it was replaced (the plain evidence's ``replaced by`` or
LlamaIndex's ``car_status: superseded`` metadata line). Superseded means: voided in the corpus's authority
graph (``AuthorityGraph.ancestors`` at car-rag's default ``min_confidence``), so the paths
without car-rag are judged by the same rule.

Stage 1 everywhere is BM25 (no model: LangChain's ``BM25Retriever``, LlamaIndex's
``BM25Retriever``), 10 candidates; ``k`` documents handed to the agent (``--k``: 5, and 10, where
car-rag's superseded records, ranked after the active ones, reach the agent). Paths:

* ``lc-stock-car``: ``langchain_core.tools.create_retriever_tool`` over ``langchain_car.CARRetriever``;
* ``lc-car-tool``: ``langchain_car.create_car_retriever_tool`` over the same retriever;
* ``lc-car-tool-compression``: the same tool over a ``ContextualCompressionRetriever`` with ``CARCompressor``;
* ``lc-stock-bm25``: ``create_retriever_tool`` over the bare ``BM25Retriever`` (no car-rag);
* ``li-retrievertool-car``: LlamaIndex ``RetrieverTool`` over ``llama_index.retrievers.car.CARRetriever``;
* ``li-retrievertool-bm25``: ``RetrieverTool`` over the bare ``BM25Retriever`` (no car-rag).

Nothing here is tuned: the paths are run as a user builds them, with the defaults named above.

Run:  python evals/integrations/agent_tools.py [--suites demo,ghsa-freeform] [--k 5,10]
"""

from __future__ import annotations

import argparse
import json
import os
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
warnings.filterwarnings("ignore", category=DeprecationWarning)

from langchain_car import CARCompressor, CARRetriever, DocumentListLookup, create_car_retriever_tool, record_to_document  # noqa: E402
from langchain_classic.retrievers import ContextualCompressionRetriever  # noqa: E402
from langchain_community.retrievers import BM25Retriever as LangChainBM25  # noqa: E402
from langchain_core.tools import create_retriever_tool  # noqa: E402
from llama_index.core.schema import BaseNode  # noqa: E402
from llama_index.core.tools import RetrieverTool  # noqa: E402
from llama_index.retrievers.bm25 import BM25Retriever as LlamaIndexBM25  # noqa: E402
from llama_index.retrievers.car import CARRetriever as LlamaIndexCARRetriever  # noqa: E402
from llama_index.retrievers.car import NodeAuthorityLookup, records_to_nodes  # noqa: E402

from car_rag import Policy, Record, load_policy, load_records  # noqa: E402
from car_rag.adapters import AuthorityGraph  # noqa: E402
from car_rag.evidence.plain import clip_text  # noqa: E402
from car_rag.evidence.wording import plain_text  # noqa: E402
from car_rag.queries import load_queries  # noqa: E402
from car_rag.resolution import DEFAULT_MIN_CONFIDENCE  # noqa: E402
from car_rag_evals.results_header import results_header  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
MARKS = ("replaced by", "car_status: superseded")
"""The plain evidence's header note, and LlamaIndex's metadata line."""
DEPTH = 10


def _suite(name: str) -> tuple[list[Record], list[str], Policy]:
    if name == "demo":
        demo = ROOT / "car_rag" / "data" / "demo"
        corpus, queries, policy = demo / "corpus.jsonl", demo / "queries.jsonl", load_policy(demo / "policy.toml")
    else:
        from car_rag_evals.suites import load_suite

        suite = load_suite(name)
        corpus, queries, policy = suite.corpus, suite.queries, load_policy(suite.policy)
    return load_records(corpus).records, [q.query for q in load_queries(queries)], policy


Returned = tuple[str, list[str]]
"""What the agent reads, and the ids of the documents in it, in order."""


def _tools(records: list[Record], policy: Policy, k: int) -> dict[str, Callable[[str], Returned]]:
    """Each path as a function from a question to what it hands the agent."""
    docs = [record_to_document(r) for r in records]
    bm25 = LangChainBM25.from_documents(docs, k=DEPTH)
    lookup = DocumentListLookup(docs)
    lc_car = CARRetriever(base_retriever=bm25, store=lookup, policy=policy, k=k)
    compression = ContextualCompressionRetriever(
        base_compressor=CARCompressor(store=lookup, policy=policy, k=k), base_retriever=bm25
    )
    nodes: list[BaseNode] = list(records_to_nodes(records))
    li_bm25 = LlamaIndexBM25.from_defaults(nodes=nodes, similarity_top_k=DEPTH)
    li_car = LlamaIndexCARRetriever(li_bm25, NodeAuthorityLookup(nodes), policy, k=k)
    li_bare = LlamaIndexBM25.from_defaults(nodes=nodes, similarity_top_k=k)

    def langchain(tool: Any) -> Callable[[str], Returned]:
        def call(question: str) -> Returned:
            message = tool.invoke({"type": "tool_call", "id": "probe", "name": tool.name, "args": {"query": question}})
            return str(message.content), [d.metadata["doc_id"] for d in message.artifact]

        return call

    def llamaindex(retriever: Any) -> Callable[[str], Returned]:
        tool = RetrieverTool.from_defaults(retriever, name="search", description="Search the documents.")

        def call(question: str) -> Returned:
            output = tool.call(question)
            return str(output.content), [n.node.metadata["doc_id"] for n in output.raw_output]

        return call

    def stock(retriever: Any) -> Any:
        return create_retriever_tool(retriever, "search", "Search the documents.", response_format="content_and_artifact")

    def ours(retriever: Any) -> Any:
        return create_car_retriever_tool(retriever, "search", "Search the documents.", response_format="content_and_artifact")

    return {
        "lc-stock-car": langchain(stock(lc_car)),
        "lc-car-tool": langchain(ours(lc_car)),
        "lc-car-tool-compression": langchain(ours(compression)),
        "lc-stock-bm25": langchain(stock(LangChainBM25.from_documents(docs, k=k))),
        "li-retrievertool-car": llamaindex(li_car),
        "li-retrievertool-bm25": llamaindex(li_bare),
    }


def _end(output: str, at: int, text: str) -> int:
    """Where a document's text printed at ``at`` ends: as written, or as the plain form escapes it."""
    for printed in (text, plain_text(clip_text(text, None))):
        if output.startswith(printed, at):
            return at + len(printed)
    return at + len(_fragment(text))


def _fragment(text: str) -> str:
    """A piece of a record's text that every path prints verbatim (its first line, cut; CRLF or LF)."""
    return clip_text(text, None).strip().split("\n", 1)[0][:80]


def audit_output(returned: Returned, records: dict[str, Record], superseded: set[str]) -> dict[str, list[str]]:
    """The superseded documents handed over, split by whether the output marks each: what stands
    between the previous document's text and its own. One whose text cannot be found is ``missing``."""
    output, doc_ids = returned
    out: dict[str, list[str]] = {"marked": [], "unmarked": [], "missing": []}
    cursor = 0
    for doc_id in doc_ids:
        fragment = _fragment(records[doc_id].text)
        at = output.find(fragment, cursor)
        if at < 0:
            out["missing"].append(doc_id)
            continue
        if doc_id in superseded:
            out["marked" if any(m in output[cursor:at].lower() for m in MARKS) else "unmarked"].append(doc_id)
        cursor = _end(output, at, records[doc_id].text)
    return out


def run_suite(name: str, ks: list[int]) -> dict[str, Any]:
    records, queries, policy = _suite(name)
    graph = AuthorityGraph(policy)
    for record in records:
        graph.add(record)
    superseded = {r.doc_id for r in records if graph.ancestors(r.doc_id, DEFAULT_MIN_CONFIDENCE)}
    by_id = {r.doc_id: r for r in records}
    rows: dict[str, Any] = {}
    for k, path, tool in [(k, path, tool) for k in ks for path, tool in _tools(records, policy, k).items()]:  # noqa: B020
        t0 = time.perf_counter()
        marked = unmarked = sets = missing = 0
        examples: list[dict[str, Any]] = []
        for question in queries:
            audit = audit_output(tool(question), by_id, superseded)
            marked += len(audit["marked"])
            unmarked += len(audit["unmarked"])
            missing += len(audit["missing"])
            sets += bool(audit["unmarked"])
            if audit["unmarked"] and len(examples) < 2:
                examples.append({"question": question, "unmarked": audit["unmarked"]})
        rows[f"{path}@{k}"] = {
            "path": path,
            "k": k,
            "superseded_shown": marked + unmarked,
            "unmarked": unmarked,
            "outputs_with_unmarked": sets,
            "texts_not_found": missing,
            "examples": examples,
            "seconds": round(time.perf_counter() - t0, 1),
        }
        print(f"{name} {path} k={k}: {unmarked} of {marked + unmarked} superseded documents unmarked", flush=True)
    return {
        "suite": name,
        "documents": len(records),
        "queries": len(queries),
        "superseded_in_corpus": len(superseded),
        "paths": rows,
    }


def markdown(results: dict[str, Any]) -> str:
    lines = [
        "# Superseded documents reaching an agent unmarked, per retrieval-tool path",
        "",
        "Each question goes through each tool as an agent would call it; a superseded document (voided in the "
        "corpus's authority graph) whose text is in the tool's output is *unmarked* when nothing between the "
        "previous document's text and its own says `replaced by` (the plain evidence's header) or "
        "`car_status: superseded` (LlamaIndex's metadata). Stage 1 is BM25 everywhere "
        f"({DEPTH} candidates, k documents to the agent). Paths: see `evals/integrations/agent_tools.py`.",
        "",
        f"Generated by `{results['command']}` on {results['generated']}.",
    ]
    for suite in results["suites"]:
        lines += [
            "",
            f"## {suite['suite']} ({suite['documents']:,} documents, {suite['queries']} questions, "
            f"{suite['superseded_in_corpus']:,} superseded in the corpus)",
            "",
            "| path | k | superseded documents shown | unmarked | outputs with an unmarked one | texts not found |",
            "|---|---|---|---|---|---|",
        ]
        for row in suite["paths"].values():
            lines.append(
                f"| `{row['path']}` | {row['k']} | {row['superseded_shown']} | {row['unmarked']} | "
                f"{row['outputs_with_unmarked']}/{suite['queries']} | {row['texts_not_found']} |"
            )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--suites", default="demo,ghsa-freeform")
    parser.add_argument("--k", default="5,10", help="documents handed to the agent (comma-separated)")
    parser.add_argument("--out", type=Path, default=ROOT / "evals" / "results" / "integrations")
    args = parser.parse_args()
    results: dict[str, Any] = {
        "suites": [run_suite(name, [int(k) for k in args.k.split(",")]) for name in args.suites.split(",")]
    }
    header = results_header(__file__)
    results["command"], results["generated"] = header.command, header.when
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "agent_tools.json").write_text(json.dumps(results, indent=1) + "\n")
    (args.out / "agent_tools.md").write_text(markdown(results))
    print(f"wrote {args.out / 'agent_tools.md'}")


if __name__ == "__main__":
    main()
