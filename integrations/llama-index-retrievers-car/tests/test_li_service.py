"""CARServiceRetriever against a real `car-rag serve` on loopback (the advisories, MiniLM, an API
key): its nodes equal the in-process CARRetriever's, given the same Stage 1 (the core's anchors),
but for what only the core's Stage 1 knows; sync and async; the nodes read back as the result they
describe; a wrong key and a server that is down are the client's clear errors."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator

import pytest
from car_rag import CallerContext, CARStore, Policy, Record
from car_rag.client import CARAuthError, CARServiceClient, CARServiceUnavailable
from car_rag.layout import CAR_AMBIGUITY, CAR_SCOPE_PROBABILITY, CAR_STAGE1_CHANNEL, CAR_STATUS
from car_rag.retriever import ControllingAuthorityRetriever
from car_rag.serve.keys import hash_key, load_api_keys
from car_rag.serve.service import Service
from car_rag_evals.servers import HOST, free_port, serving
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode

from llama_index.retrievers.car import CARRetriever, CARServiceRetriever, nodes_to_result, records_to_nodes

KEY = "k-app"
READER = CallerContext()
"""Whom the key reads as: no tenant, no principal (the advisories' vaultkit fix is for one principal)."""
QUERIES = [
    "Is yamlette still vulnerable to code execution when loading YAML?",
    "Was the tarnish path traversal fixed?",
    "minimist prototype pollution",
]
CORE_STAGE1_ONLY = {CAR_STAGE1_CHANNEL, CAR_SCOPE_PROBABILITY, CAR_AMBIGUITY}
"""What the served nodes carry from the core's own Stage 1 that a CARRetriever wrapping another
retriever does not know: the channel that found a record (the wrapper names its retriever's
class), the latent-scope step's scope probability and the ambiguity it finds."""


class CoreAnchors(BaseRetriever):
    """The core's Stage-1 anchors for a question, as the nodes of the same records with their fused
    scores: the Stage 1 the server runs, handed to the in-process CARRetriever."""

    def __init__(self, core: ControllingAuthorityRetriever, nodes: list[TextNode]):
        self.core, self.nodes = core, {n.node_id: n for n in nodes}
        super().__init__()

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        anchors = self.core.stage1(query_bundle.query_str, READER)
        return [NodeWithScore(node=self.nodes[h.doc_id], score=h.score) for h in anchors]


@pytest.fixture(scope="module")
def store(tmp_path_factory, policy: Policy, records: list[Record], embedder) -> Iterator[CARStore]:
    store = CARStore.open(tmp_path_factory.mktemp("service-store"), policy, embedder=embedder)
    assert store.ingest(records, progress=False).errors == []
    yield store
    store.close()


@pytest.fixture(scope="module")
def url(store: CARStore, tmp_path_factory) -> Iterator[str]:
    keys = tmp_path_factory.mktemp("keys") / "keys.json"
    keys.write_text(json.dumps({"keys": [{"name": "app", "sha256": hash_key(KEY)}]}))
    keys.chmod(0o600)
    with serving(Service(store, api_keys=load_api_keys(keys), timeout_ms=30_000)) as base:
        yield base


def test_nodes_equal_the_in_process_retrievers_on_the_same_stage1(store, url, records, policy):
    nodes = records_to_nodes(records)
    local = CARRetriever(CoreAnchors(ControllingAuthorityRetriever(store), nodes), nodes, policy, k=8, caller=READER)
    remote = CARServiceRetriever(url, api_key=KEY, k=8)
    statuses = set()
    for query in QUERIES:
        served, expected = remote.retrieve(query), local.retrieve(query)
        assert [n.node.node_id for n in served] == [n.node.node_id for n in expected]
        assert [n.score for n in served] == pytest.approx([n.score for n in expected])
        for got, want in zip(served, expected):
            assert got.node.get_content() == want.node.get_content()
            assert got.node.excluded_llm_metadata_keys == want.node.excluded_llm_metadata_keys
            meta, other = got.node.metadata, want.node.metadata
            assert {k for k in meta.keys() | other.keys() if meta.get(k) != other.get(k)} <= CORE_STAGE1_ONLY
            assert meta[CAR_SCOPE_PROBABILITY] is not None  # the core's latent-scope step ran
            statuses.add(meta[CAR_STATUS])
        assert asyncio.run(remote.aretrieve(query)) == served
    assert statuses == {"active", "superseded"}


def test_served_nodes_read_back_as_the_result_they_describe(store, url, policy):
    query = QUERIES[0]
    served = CARServiceRetriever(url, api_key=KEY, k=8).retrieve(query)
    result = nodes_to_result(query, served, policy)
    core = ControllingAuthorityRetriever(store).retrieve(query, READER)
    assert [(r.doc_id, r.status, r.superseded_by) for r in result.ranked] == [
        (r.doc_id, r.status, r.superseded_by) for r in core.top(8)
    ]


def test_a_wrong_key_and_a_server_that_is_down_are_clear_errors(url):
    with pytest.raises(CARAuthError, match="401"):
        CARServiceRetriever(url, api_key="wrong").retrieve(QUERIES[0])
    down = f"http://{HOST}:{free_port()}"
    with pytest.raises(CARServiceUnavailable, match=f"cannot reach car-rag serve at {down}"):
        CARServiceRetriever(down, retries=0).retrieve(QUERIES[0])
    with pytest.raises(CARServiceUnavailable, match=f"cannot reach car-rag serve at {down}"):
        asyncio.run(CARServiceRetriever(down, retries=0).aretrieve(QUERIES[0]))
    with pytest.raises(ValueError, match="k must be a positive integer"):
        CARServiceRetriever(url, k=0)
    with pytest.raises(ValueError, match="pass api_key and client options to the CARServiceClient"):
        CARServiceRetriever(CARServiceClient(url), api_key=KEY)


def test_a_client_of_ones_own(url):
    """A CARServiceClient given whole (its key, timeouts, retries): the same nodes as from the URL."""
    query = QUERIES[1]
    own = CARServiceRetriever(CARServiceClient(url, api_key=KEY, timeout_s=60, retries=0), k=3)
    assert own.retrieve(query) == CARServiceRetriever(url, api_key=KEY, k=3).retrieve(query)
