"""car-rag in a LangChain LCEL chain over langchain-chroma.

    retriever = CARRetriever(base_retriever=chroma.as_retriever(...), store=chroma, policy=...)
    chain = {"context": retriever | format_evidence, "question": RunnablePassthrough()} | answer_prompt | llm

The Chroma collection holds car-rag's demo corpus (security advisories and case law),
embedded with the packaged all-MiniLM-L6-v2 through ``CAREmbeddings`` (offline). The chat
model is any OpenAI-compatible endpoint (``pip install langchain-openai``; set
OPENAI_API_KEY, and OPENAI_BASE_URL for a local server such as vLLM, llama.cpp or Ollama;
``--model`` names the model). Without one, the chain ends in ``OfflineFakeChatModel``, a
stand-in that is not a language model: it only lists the documents it was given (car-rag's
default evidence: the records as numbered plain documents, in car-rag's order), so the
example still runs offline and shows what a real model would receive. Which records are
current and which they replaced is printed from the retriever's annotations.

Run:  python examples/langchain_lcel_chain.py [--question "..."] [--model NAME] [--show-evidence]
Needs: pip install -e ./integrations/langchain-car langchain-chroma
"""

from __future__ import annotations

import argparse
import os
import re
import uuid
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")

import chromadb  # noqa: E402
from chromadb.config import Settings  # noqa: E402
from langchain_car import CAREmbeddings, CARRetriever, answer_prompt, check_documents, load_documents  # noqa: E402
from langchain_chroma import Chroma  # noqa: E402
from langchain_core.documents import Document  # noqa: E402
from langchain_core.language_models import BaseChatModel  # noqa: E402
from langchain_core.messages import AIMessage, BaseMessage  # noqa: E402
from langchain_core.output_parsers import StrOutputParser  # noqa: E402
from langchain_core.outputs import ChatGeneration, ChatResult  # noqa: E402
from langchain_core.runnables import RunnablePassthrough  # noqa: E402

import car_rag  # noqa: E402
from car_rag import load_policy  # noqa: E402
from car_rag.store import DEFAULT_HNSW  # noqa: E402

DEMO = Path(car_rag.__file__).resolve().parent / "data" / "demo"
QUESTIONS = [
    "Is lodash still vulnerable to CVE-2099-10001, the prototype pollution through merge and defaultsDeep?",
    "Can a bare procedural violation of a consumer statute, with no real-world harm, establish standing?",
]


DOCUMENT_HEADER = re.compile(r"^\[Document (\d+)\] \((.*)\)$", re.M)
"""A plain document's header line: its number, then its type and any note (car_rag.evidence.plain)."""


class OfflineFakeChatModel(BaseChatModel):
    """A fake chat model (no language model): lists the documents it was given, in their order."""

    @property
    def _llm_type(self) -> str:
        return "offline-fake-chat-model"

    def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any) -> ChatResult:
        read = [f"[Document {n}] {about}" for n, about in DOCUMENT_HEADER.findall(str(messages[-1].content))]
        text = f"(offline fake chat model, not an answer) it read {len(read)} documents, in car-rag's order: " + "; ".join(read)
        return ChatResult(generations=[ChatGeneration(message=AIMessage(content=text))])


def authority(docs: list[Document]) -> str:
    """The current records among ``docs`` and the records they replaced (from car-rag's annotations)."""
    current = [d.metadata["doc_id"] for d in docs if d.metadata["car_status"] == "active"]
    replaced: dict[str, list[str]] = {}
    for d in docs:
        for link in d.metadata["car_voids"]:
            replaced.setdefault(link["doc_id"], []).append(d.metadata["doc_id"])
        for superseder in d.metadata["car_superseded_by"]:
            replaced.setdefault(d.metadata["doc_id"], []).append(superseder)
    by = [f"{target} (by {', '.join(dict.fromkeys(ids))})" for target, ids in replaced.items()]
    return f"current: {', '.join(current) or 'none'}; replaced: {', '.join(by) or 'none'}"


def chat_model(model: str) -> BaseChatModel:
    if not (os.environ.get("OPENAI_API_KEY") or os.environ.get("OPENAI_BASE_URL")):
        print("No OPENAI_API_KEY / OPENAI_BASE_URL: using OfflineFakeChatModel (a stand-in, not a language model).\n")
        return OfflineFakeChatModel()
    try:
        from langchain_openai import ChatOpenAI
    except ImportError as exc:
        raise SystemExit("an OpenAI-compatible chat model needs: pip install langchain-openai") from exc
    return ChatOpenAI(model=model, temperature=0, api_key=os.environ.get("OPENAI_API_KEY", "not-needed"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--question", action="append", help="ask this (repeatable); default: two demo questions")
    parser.add_argument("--model", default=os.environ.get("OPENAI_MODEL", "gpt-4o-mini"))
    parser.add_argument("--show-evidence", action="store_true", help="print the evidence the model receives")
    args = parser.parse_args()

    # The user's vector store: langchain-chroma, documents carrying car-rag metadata.
    chroma = Chroma(
        collection_name=f"car-demo-{uuid.uuid4().hex[:8]}",
        embedding_function=CAREmbeddings(),
        client=chromadb.EphemeralClient(settings=Settings(anonymized_telemetry=False)),
        collection_configuration={"hnsw": {**DEFAULT_HNSW}},
    )
    docs = load_documents(DEMO / "corpus.jsonl")
    chroma.add_documents(docs, ids=[d.id for d in docs])

    retriever = CARRetriever(
        base_retriever=chroma.as_retriever(search_kwargs={"k": 10}),  # Stage 1: what you already run
        store=chroma,  # Stage 2: filter-only lookups on the same collection
        policy=load_policy(DEMO / "policy.toml"),  # the demo's rules (security + case law)
        k=5,
    )
    # `retriever | format_evidence` works as is: numbered plain documents in car-rag's order. The
    # bound formatter also knows the retriever's policy, which form="reader" (authority digest)
    # and form="audit" (the full XML with retrieval rationale) word their sentences with.
    evidence = retriever.evidence_formatter()
    chain = (
        {"context": retriever | evidence, "question": RunnablePassthrough()}
        | answer_prompt
        | chat_model(args.model)
        | StrOutputParser()
    )

    for question in args.question or QUESTIONS:
        print(f"Q: {question}")
        docs = retriever.invoke(question)
        for doc in docs:
            m = doc.metadata
            why = (
                f" by {m['car_rule']}, superseded by {', '.join(m['car_superseded_by'])}"
                if m["car_status"] == "superseded"
                else ""
            )
            voids = "".join(f" (voids {link['doc_id']} by {link['rule']})" for link in m["car_voids"])
            print(f"  {m['car_rank']}. [{m['car_status']}] {doc.id}{why}{voids}")
        print(f"  {authority(docs)}")
        if args.show_evidence:
            print(evidence.invoke(docs))
        answer = chain.invoke(question)
        # The authority guard after the model (as a runnable: langchain_car.authority_guard()).
        verdict = check_documents(answer, docs, retriever.policy)
        print(f"A: {answer}")
        print(f"   guard: {'flagged: ' + '; '.join(f.message for f in verdict.findings) if verdict.flagged else 'consistent'}\n")


if __name__ == "__main__":
    main()
