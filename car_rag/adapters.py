"""The adapter SPI: what an integration implements and calls to put car-rag's authority
resolution behind a framework's own retriever and store.

A framework's retriever finds the anchors (Stage 1); an adapter translates car-rag's
:class:`ScopeQuery` lookups into its store's metadata filters (:class:`AuthorityStore`,
one method), lets :class:`AuthorityClosure` plan the lookup rounds and resolve, and writes the
result back onto the framework's objects (:func:`annotations_for`). Records travel as flat
metadata (:class:`RecordLayout`). ``docs/ARCHITECTURE.md`` ("The adapter contract") walks
through it; :class:`DictStore` is the smallest complete adapter. Users of the library need
none of this: they import from :mod:`car_rag`.
"""

from car_rag.annotations import UNRESOLVED, annotations_for, result_from_annotations, status_rule, unresolved_annotations
from car_rag.dict_store import DictStore
from car_rag.evidence import EvidencePacket, build_packets
from car_rag.framework_stage1 import DenseSearch, FrameworkCorpus, MissingAuthorityMetadata, StoreItem, group_records
from car_rag.graph import RSSG, AuthorityGraph, Edge
from car_rag.layout import LAYOUT_VERSION, LayoutError, RecordLayout
from car_rag.lookup import (
    SCORE_SCALES,
    AuthorityClosure,
    AuthorityStore,
    ScopeQuery,
    StoredItem,
    aresolve_closure,
    resolve_closure,
)
from car_rag.resolution import Anchor, resolve_authority

__all__ = [
    # Stage 1 to Stage 2: the anchors a framework found, and resolution over any graph
    "Anchor",
    "resolve_authority",
    # the core's own Stage 1 over a framework's store (its dense search beside car-rag's BM25)
    "FrameworkCorpus",
    "DenseSearch",
    "StoreItem",
    "group_records",
    "MissingAuthorityMetadata",
    # Stage 2 over a store car-rag does not own
    "AuthorityClosure",
    "AuthorityStore",
    "ScopeQuery",
    "StoredItem",
    "resolve_closure",
    "aresolve_closure",
    "SCORE_SCALES",
    "DictStore",
    # records as flat metadata, and results written back onto a framework's items
    "RecordLayout",
    "LAYOUT_VERSION",
    "LayoutError",
    "annotations_for",
    "result_from_annotations",
    "unresolved_annotations",
    "status_rule",
    "UNRESOLVED",
    # the graph and the packets, for adapters that build their own
    "AuthorityGraph",
    "Edge",
    "RSSG",
    "EvidencePacket",
    "build_packets",
    # a framework retriever's own arguments
    "checked_k",
]


def checked_k(k: object) -> int:
    """``k``, the records a framework retriever returns, when it is a positive int (not a bool),
    else ValueError naming it: every retriever of both integrations takes ``k`` the same way."""
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"k must be a positive integer, got {k!r}")
    return k
