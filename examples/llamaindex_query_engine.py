"""car-rag inside a LlamaIndex RetrieverQueryEngine: "has X been fixed?" over Chroma.

The security advisories and release notes of car-rag's demo corpus go into a Chroma-backed
``VectorStoreIndex`` embedded with the packaged all-MiniLM-L6-v2 (no download). A
``CARRetriever`` wraps the index's own vector retriever: the disclosure that matches the
question is the anchor, and the release note that fixed it, which shares almost no words
with the question, is looked up on the same Chroma collection by metadata. The engine's
synthesizer hands the LLM car-rag's evidence (the records as numbered plain documents in
car-rag's order, the default form), not raw node text.

Any OpenAI-compatible server answers (vLLM, llama.cpp ``llama-server``, Ollama, LM Studio,
OpenAI itself); without one reachable, the script prints the evidence it would have sent.

    pip install -e ./integrations/llama-index-retrievers-car[chroma]
    python examples/llamaindex_query_engine.py                          # evidence only, if no server
    python examples/llamaindex_query_engine.py --base-url http://127.0.0.1:8080/v1 --model qwen2.5-7b-instruct
    python examples/llamaindex_query_engine.py --question "Has the axios SSRF been fixed?"
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")

import chromadb  # noqa: E402
from chromadb.config import Settings as ChromaSettings  # noqa: E402
from llama_index.core import StorageContext, VectorStoreIndex  # noqa: E402
from llama_index.core.base.llms.types import (  # noqa: E402
    ChatMessage,
    ChatResponse,
    CompletionResponse,
    CompletionResponseGen,
    LLMMetadata,
)
from llama_index.core.llms import CustomLLM  # noqa: E402
from llama_index.core.query_engine import RetrieverQueryEngine  # noqa: E402
from llama_index.retrievers.car import CAREmbedding, CARRetriever, EvidenceSynthesizer, records_to_nodes  # noqa: E402
from llama_index.vector_stores.chroma import ChromaVectorStore  # noqa: E402

import car_rag  # noqa: E402
from car_rag import load_records  # noqa: E402
from car_rag.store import DEFAULT_HNSW  # noqa: E402

POLICY = "security-advisory"
QUESTIONS = [
    "Has the zipcraft Zip Slip path traversal through crafted entry names been fixed?",
    "Has the lodash prototype pollution in merge and defaultsDeep been fixed?",
    "Has the mdrender ReDoS in link parsing been fixed?",
]


class OpenAICompatibleLLM(CustomLLM):
    """A minimal chat client for any OpenAI-compatible ``/chat/completions`` endpoint (standard
    library only; with ``llama-index-llms-openai-like`` installed the script uses that instead)."""

    base_url: str
    model: str
    api_key: str = "not-needed"
    timeout: float = 120.0

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(model_name=self.model, is_chat_model=True, context_window=8192, num_output=512)

    def chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        body = {
            "model": self.model,
            "messages": [{"role": m.role.value, "content": m.content or ""} for m in messages],
            "temperature": 0,
        }
        request = urllib.request.Request(
            self.base_url.rstrip("/") + "/chat/completions",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json", "Authorization": f"Bearer {self.api_key}"},
        )
        with urllib.request.urlopen(request, timeout=self.timeout) as response:
            text = json.load(response)["choices"][0]["message"]["content"]
        return ChatResponse(message=ChatMessage(role="assistant", content=text))

    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        return CompletionResponse(text=self.chat([ChatMessage(role="user", content=prompt)]).message.content or "")

    def stream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponseGen:
        yield self.complete(prompt)


def make_llm(base_url: str, model: str, api_key: str) -> Any:
    try:
        from llama_index.llms.openai_like import OpenAILike
    except ImportError:
        return OpenAICompatibleLLM(base_url=base_url, model=model, api_key=api_key)
    return OpenAILike(api_base=base_url, model=model, api_key=api_key, is_chat_model=True, temperature=0)


def server_up(base_url: str, api_key: str) -> bool:
    request = urllib.request.Request(base_url.rstrip("/") + "/models", headers={"Authorization": f"Bearer {api_key}"})
    try:
        with urllib.request.urlopen(request, timeout=3):
            return True
    except (urllib.error.URLError, OSError, ValueError):
        return False


def build_index(chroma_dir: Path) -> VectorStoreIndex:
    """The demo corpus's security records in a persistent Chroma collection (car-rag's HNSW settings)."""
    corpus = Path(car_rag.__file__).parent / "data" / "demo" / "corpus.jsonl"
    records = [r for r in load_records(corpus).records if "cve_id" in r.scope]
    client = chromadb.PersistentClient(path=str(chroma_dir), settings=ChromaSettings(anonymized_telemetry=False))
    collection = client.get_or_create_collection(
        "security-advisories", embedding_function=None, configuration={"hnsw": DEFAULT_HNSW}
    )
    vector_store = ChromaVectorStore(chroma_collection=collection)
    embed_model = CAREmbedding()  # the packaged all-MiniLM-L6-v2, offline
    if collection.count() == len(records):
        return VectorStoreIndex.from_vector_store(vector_store, embed_model=embed_model)
    storage = StorageContext.from_defaults(vector_store=vector_store)
    return VectorStoreIndex(records_to_nodes(records), storage_context=storage, embed_model=embed_model)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--question", action="append", help="ask this instead of the built-in questions (repeatable)")
    parser.add_argument("--base-url", default=os.environ.get("OPENAI_BASE_URL", "http://127.0.0.1:8000/v1"))
    parser.add_argument("--model", default=os.environ.get("OPENAI_MODEL", "local-model"))
    parser.add_argument("--api-key", default=os.environ.get("OPENAI_API_KEY", "not-needed"))
    parser.add_argument("--chroma-dir", type=Path, help="keep the Chroma collection here (default: a temporary folder)")
    parser.add_argument("--top-k", type=int, default=3, help="Stage-1 hits (anchors) per question")
    args = parser.parse_args()

    index = build_index(args.chroma_dir or Path(tempfile.mkdtemp(prefix="car-llamaindex-")))
    retriever = CARRetriever.from_index(index, POLICY, similarity_top_k=args.top_k)
    online = server_up(args.base_url, args.api_key)
    llm = make_llm(args.base_url, args.model, args.api_key) if online else None
    synthesizer = EvidenceSynthesizer(llm=llm or OpenAICompatibleLLM(base_url=args.base_url, model=args.model), policy=POLICY)
    engine = RetrieverQueryEngine(retriever=retriever, response_synthesizer=synthesizer)
    if not online:
        print(f"No OpenAI-compatible server at {args.base_url}: printing the evidence the LLM would get.\n")

    for question in args.question or QUESTIONS:
        print("=" * 100, f"\nQ: {question}\n")
        if online:
            response = engine.query(question)
            print(f"A: {response}\n")
            nodes = response.source_nodes
        else:
            nodes = retriever.retrieve(question)
            print(synthesizer.render(question, nodes), "\n")
        for n in nodes:
            meta = n.node.metadata
            why = f" by {', '.join(meta['car_superseded_by'])} ({meta['car_rule']})" if meta["car_status"] == "superseded" else ""
            print(f"  {meta['car_status']:<10} {meta['doc_id']}{why}")
        print()


if __name__ == "__main__":
    main()
