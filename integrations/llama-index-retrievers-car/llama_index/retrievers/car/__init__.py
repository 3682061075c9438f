"""car-rag for LlamaIndex: controlling-authority retrieval over the vector store you already run.

>>> from llama_index.retrievers.car import CARRetriever, EvidenceSynthesizer
>>> retriever = CARRetriever(index.as_retriever(similarity_top_k=10), index.vector_store, "security-advisory")  # doctest: +SKIP

The node postprocessors live in :mod:`llama_index.postprocessor.car` (same distribution).
"""

from llama_index.retrievers.car.base import DEFAULT_K, CARRetriever
from llama_index.retrievers.car.embedding import CAREmbedding
from llama_index.retrievers.car.extract import CARAuthorityExtractor, CARAuthorityMetadataExtractor
from llama_index.retrievers.car.guard import CAR_GUARD, check_response
from llama_index.retrievers.car.index_retriever import CARIndexRetriever, IndexDenseSearch, MissingAuthorityMetadata
from llama_index.retrievers.car.layout import (
    MetadataLayout,
    load_nodes,
    node_doc_id,
    node_to_record,
    record_to_node,
    records_to_nodes,
)
from llama_index.retrievers.car.lookup import (
    AuthorityLookup,
    NodeAuthorityLookup,
    ScopeQuery,
    VectorStoreAuthorityLookup,
    authority_lookup,
)
from llama_index.retrievers.car.metrics import (
    CARAnswerEvaluator,
    CARAuditMetric,
    CARClosureViolations,
    CARControllingHit,
    CARTheorem4,
)
from llama_index.retrievers.car.resolver import (
    CAR_AMBIGUITY,
    CAR_ANCHOR_ID,
    CAR_HIDDEN_SUPERSEDER,
    CAR_KEYS,
    CAR_RANK,
    CAR_ROLE,
    CAR_RULE,
    CAR_SCOPE_PROBABILITY,
    CAR_STAGE1_RANK,
    CAR_STAGE1_SCORE,
    CAR_STATUS,
    CAR_SUPERSEDED_BY,
    CAR_VOIDED_BY,
    CAR_VOIDS,
    AuthorityResolver,
    CARResolutionEvent,
    Resolution,
    nodes_to_result,
)
from llama_index.retrievers.car.service import CARServiceRetriever, served_node
from llama_index.retrievers.car.synthesizer import (
    EvidencePromptTemplate,
    EvidenceSynthesizer,
    evidence_prompt_template,
    render_evidence,
)

__version__ = "0.1.0"
"""The one version source: packaging reads it (pyproject ``[tool.setuptools.dynamic]``)."""

__all__ = [
    "AuthorityLookup",
    "AuthorityResolver",
    "CARAuthorityExtractor",
    "CARAuthorityMetadataExtractor",
    "CAREmbedding",
    "CARIndexRetriever",
    "CARResolutionEvent",
    "CARRetriever",
    "CAR_AMBIGUITY",
    "CAR_ANCHOR_ID",
    "CAR_GUARD",
    "CAR_HIDDEN_SUPERSEDER",
    "CAR_KEYS",
    "CAR_RANK",
    "CAR_ROLE",
    "CAR_RULE",
    "CAR_SCOPE_PROBABILITY",
    "CAR_STAGE1_RANK",
    "CAR_STAGE1_SCORE",
    "CAR_STATUS",
    "CAR_SUPERSEDED_BY",
    "CAR_VOIDED_BY",
    "CAR_VOIDS",
    "DEFAULT_K",
    "EvidencePromptTemplate",
    "EvidenceSynthesizer",
    "IndexDenseSearch",
    "MetadataLayout",
    "MissingAuthorityMetadata",
    "NodeAuthorityLookup",
    "Resolution",
    "ScopeQuery",
    "VectorStoreAuthorityLookup",
    "authority_lookup",
    "check_response",
    "evidence_prompt_template",
    "load_nodes",
    "node_doc_id",
    "node_to_record",
    "nodes_to_result",
    "record_to_node",
    "records_to_nodes",
    "render_evidence",
    "__version__",
    "CARAnswerEvaluator",
    "CARAuditMetric",
    "CARClosureViolations",
    "CARControllingHit",
    "CARTheorem4",
    "CARServiceRetriever",
    "served_node",
]
