"""car-rag: retrieval that answers from the document that controls, not the one that matches.

The library logs what it does under the ``car_rag`` logger (store opened and ingested, lookups,
recoveries) and adds only a ``NullHandler``: the application decides what is shown
(``car-rag -v`` shows INFO, ``-vv`` DEBUG).
"""

import logging

from car_rag.dict_store import DictStore
from car_rag.eligibility import CallerContext
from car_rag.embedding import DEFAULT_MODEL, Embedder
from car_rag.evidence import EvidencePacket, build_packets, render
from car_rag.evidence import render_xml as render_xml
from car_rag.extractors import MissingScope, ScopeExtractor
from car_rag.graph import RSSG, AuthorityGraph, Edge, SupersessionCycleError
from car_rag.layout import LAYOUT_VERSION, LayoutError, RecordLayout
from car_rag.lookup import AuthorityClosure, AuthorityStore, ScopeQuery, StoredItem
from car_rag.policy import EXPLICIT_RULE, Policy, PolicyError, Rule, builtin_policies, load_policy
from car_rag.records import LoadReport, Record, RecordError, load_records, parse_records
from car_rag.resolution import Anchor, RetrievalResult, RetrievedRecord, resolve_authority
from car_rag.retriever import ControllingAuthorityRetriever
from car_rag.store import CARStore, IngestReport, StoreError

__version__ = "0.1.0"
"""The one version source: packaging reads it (pyproject ``[tool.setuptools.dynamic]``), ``car-rag --version`` prints it."""

logging.getLogger(__name__).addHandler(logging.NullHandler())

__all__ = [
    "Anchor",
    "AuthorityClosure",
    "AuthorityStore",
    "DictStore",
    "LAYOUT_VERSION",
    "LayoutError",
    "RecordLayout",
    "ScopeQuery",
    "StoredItem",
    "AuthorityGraph",
    "CARStore",
    "CallerContext",
    "ControllingAuthorityRetriever",
    "DEFAULT_MODEL",
    "EXPLICIT_RULE",
    "Edge",
    "Embedder",
    "EvidencePacket",
    "IngestReport",
    "LoadReport",
    "MissingScope",
    "Policy",
    "PolicyError",
    "RSSG",
    "Record",
    "RecordError",
    "RetrievalResult",
    "RetrievedRecord",
    "ScopeExtractor",
    "Rule",
    "StoreError",
    "SupersessionCycleError",
    "build_packets",
    "builtin_policies",
    "load_policy",
    "load_records",
    "parse_records",
    "render",
    "resolve_authority",
    "__version__",
]
