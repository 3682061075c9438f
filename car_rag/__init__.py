"""car-rag: retrieval that answers from the document that controls, not the one that matches.

The user API is this module's ``__all__``: open a store, ingest records, retrieve, render
evidence for a model, check its answer. What an integration builds on (Stage 2 over a
store car-rag does not own) is :mod:`car_rag.adapters`.

The library logs what it does under the ``car_rag`` logger (store opened and ingested, lookups,
recoveries) and adds only a ``NullHandler``: the application decides what is shown
(``car-rag -v`` shows INFO, ``-vv`` DEBUG).
"""

import importlib
import logging
from typing import Any

from car_rag.ambiguity import Ambiguity
from car_rag.deprecation import warn_renamed
from car_rag.eligibility import CallerContext
from car_rag.embedding import Embedder
from car_rag.evidence import render
from car_rag.graph import SupersessionCycleError
from car_rag.guard import check_answer
from car_rag.policy import Policy, PolicyError, builtin_policies, load_policy
from car_rag.records import Record, RecordError, load_records
from car_rag.resolution import RetrievalResult, RetrievedRecord
from car_rag.retriever import ControllingAuthorityRetriever
from car_rag.store import CARStore, IngestReport, StoreError

__version__ = "0.1.0"
"""The one version source: packaging reads it (pyproject ``[tool.setuptools.dynamic]``), ``car-rag --version`` prints it."""

logging.getLogger(__name__).addHandler(logging.NullHandler())

__all__ = [
    # a store and what retrieval returns
    "CARStore",
    "IngestReport",
    "Embedder",
    "ControllingAuthorityRetriever",
    "RetrievalResult",
    "RetrievedRecord",
    "Ambiguity",
    # records and the policies that decide what voids what
    "Record",
    "load_records",
    "Policy",
    "load_policy",
    "builtin_policies",
    # who is reading
    "CallerContext",
    # evidence for a model, and a check of its answer
    "render",
    "check_answer",
    # errors
    "PolicyError",
    "RecordError",
    "StoreError",
    "SupersessionCycleError",
    "__version__",
]

_MOVED = {
    **dict.fromkeys(
        (
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
            "Edge",
            "RSSG",
            "EvidencePacket",
            "build_packets",
            "resolve_authority",
        ),
        "car_rag.adapters",
    ),
    "DEFAULT_MODEL": "car_rag.embedding",
    "EXPLICIT_RULE": "car_rag.rules",
    "Rule": "car_rag.rules",
    "MissingScope": "car_rag.extractors",
    "ScopeExtractor": "car_rag.extractors",
    "LoadReport": "car_rag.records",
    "parse_records": "car_rag.records",
    "render_xml": "car_rag.evidence",
}
"""Names this module exported before its public face was cut to the user API (issue 31): still
importable for one release, with a warning naming where they live now."""


def __getattr__(name: str) -> Any:
    if name not in _MOVED:
        raise AttributeError(f"module 'car_rag' has no attribute {name!r}")
    home = _MOVED[name]
    if name != "render_xml":  # render_xml warns itself, naming render
        warn_renamed(f"car_rag.{name}", f"{home}.{name}")
    return getattr(importlib.import_module(home), name)
