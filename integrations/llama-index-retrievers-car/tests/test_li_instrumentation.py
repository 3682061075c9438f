"""Stage 2 lookups and the resolution as LlamaIndex instrumentation spans, and a resolution
event, seen through handlers on the root dispatcher (real Chroma and MiniLM)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from llama_index.core.instrumentation import get_dispatcher
from llama_index.core.instrumentation.event_handlers import BaseEventHandler
from llama_index.core.instrumentation.span_handlers import SimpleSpanHandler

from llama_index.retrievers.car import CARResolutionEvent, CARRetriever
from test_li_retriever import YAML_Q


class _Events(BaseEventHandler):
    events: list[Any] = []

    @classmethod
    def class_name(cls) -> str:
        return "_Events"

    def handle(self, event: Any, **kwargs: Any) -> None:
        self.events.append(event)


@pytest.fixture()
def handlers():
    root = get_dispatcher()
    spans, events = SimpleSpanHandler(), _Events(events=[])
    root.add_span_handler(spans)
    root.add_event_handler(events)
    yield spans, events
    root.span_handlers.remove(spans)
    root.event_handlers.remove(events)


def _check(spans: SimpleSpanHandler, events: _Events) -> None:
    by_id = {s.id_: s for s in spans.completed_spans}
    names = {s.id_: s.id_.rsplit("-", 5)[0] for s in spans.completed_spans}
    resolve = [i for i, n in names.items() if n.startswith("AuthorityResolver.") and n.endswith("resolve")]
    fetches = [i for i, n in names.items() if n.startswith("VectorStoreAuthorityLookup.") and "fetch" in n]
    assert len(resolve) == 1 and fetches
    assert all(by_id[f].parent_id == resolve[0] for f in fetches)  # lookups nest in the resolution
    parent = by_id[resolve[0]].parent_id
    assert parent is not None and names[parent].startswith("CARRetriever.")  # which nests in the retriever's span
    [event] = [e for e in events.events if isinstance(e, CARResolutionEvent)]
    assert event.span_id == resolve[0] and event.lookups >= 1 and event.rounds >= 1
    assert "adv-yamlette-2.0.1-release" in event.active
    assert event.superseded["adv-yamlette-disclosure"] == ["adv-yamlette-2.0.1-release"]


def test_spans_and_event_sync(index, policy, handlers):
    CARRetriever(index.as_retriever(similarity_top_k=3), index.vector_store, policy).retrieve(YAML_Q)
    _check(*handlers)


def test_spans_and_event_async(index, policy, handlers):
    asyncio.run(CARRetriever(index.as_retriever(similarity_top_k=3), index.vector_store, policy).aretrieve(YAML_Q))
    _check(*handlers)
