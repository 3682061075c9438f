"""Authority from raw text: doc types, scope and supersession edges with confidence.

``car-rag extract RAW.jsonl --policy P --out RECORDS.jsonl`` and ``car-rag ingest --extract``
run :class:`AuthorityExtractor`; the policy's ``[extract]`` section
(:class:`car_rag.policy.Extraction`) declares how documents cite each other and how they
are typed. One concept per module: raw documents (``documents``), identifier resolution
(``identifiers``), citations in prose (``citations``), header fields (``headers``), doc
types (``doc_types``), the report (``report``), the assembly (``extractor``).
"""

from car_rag.extract.citations import ExtractedEdge, Skipped
from car_rag.extract.documents import MAX_CHARS, RawDocument
from car_rag.extract.extractor import PROVENANCE, AuthorityExtractor
from car_rag.extract.identifiers import Citation, IdentifierResolver
from car_rag.extract.report import Edge, ExtractReport

__all__ = [
    "MAX_CHARS",
    "PROVENANCE",
    "AuthorityExtractor",
    "Citation",
    "Edge",
    "ExtractReport",
    "ExtractedEdge",
    "IdentifierResolver",
    "RawDocument",
    "Skipped",
]
