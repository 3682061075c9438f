"""Raw documents in, records out: doc types, scope and supersession edges with confidence.

:class:`AuthorityExtractor` reads each document's headers (:mod:`~car_rag.extract.headers`)
and prose (:mod:`~car_rag.extract.citations`), types it (:mod:`~car_rag.extract.doc_types`),
asks the optional LLM route (:mod:`~car_rag.extract.llm`) only for what the patterns left
empty, fills scope with the policy's ``[record_scope]`` extractors (issue 22's, unchanged),
and puts each edge on its superseder's record as a ``supersedes`` entry with its
confidence: below a query's ``min_confidence`` it leaves its target *contested*, not voided
(Definition 9). Every extracted field's ``source`` and ``confidence`` go in the record's
``metadata["extracted"]``.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from car_rag.extract.citations import ExtractedEdge, Skipped, prose_edges
from car_rag.extract.doc_types import DocTyper, Typed
from car_rag.extract.documents import MAX_CHARS, RawDocument, raw_documents, read_raw
from car_rag.extract.headers import header_edges
from car_rag.extract.identifiers import IdentifierResolver
from car_rag.extract.report import Edge, ExtractReport
from car_rag.extractors import ScopeExtractionError, ScopeExtractor, missing_scope
from car_rag.policy import Policy, load_policy
from car_rag.records import Record, RecordError

__all__ = ["AuthorityExtractor", "PROVENANCE"]

PROVENANCE = "extracted"
"""The metadata key holding each extracted field's source and confidence."""


def _merge(found: Iterable[ExtractedEdge]) -> dict[tuple[str, str], Edge]:
    edges: dict[tuple[str, str], Edge] = {}
    for e in found:
        edge = edges.setdefault((e.superseder, e.superseded), Edge(e.superseder, e.superseded, 0.0))
        edge.confidence = max(edge.confidence, e.confidence)
        if e.source not in edge.sources:
            edge.sources.append(e.source)
        edge.evidence.append(
            {"found_in": e.found_in, "source": e.source, "confidence": e.confidence, "text": e.evidence, "span": list(e.span)}
        )
    return edges


def _cycles(edges: Iterable[tuple[str, str]]) -> list[list[str]]:
    """Each cycle the edges close (superseder first, as ``a ⊳ b ⊳ a``), found once."""
    out: dict[str, list[str]] = {}
    succ: dict[str, list[str]] = {}
    for a, b in edges:
        succ.setdefault(a, []).append(b)
    for start in sorted(succ):
        stack = [(start, [start])]
        while stack:
            node, path = stack.pop()
            for nxt in succ.get(node, ()):
                if nxt == start:
                    key = ">".join(sorted(path))
                    out.setdefault(key, [*path, start])
                elif nxt not in path and nxt > start:
                    stack.append((nxt, [*path, nxt]))
    return list(out.values())


class AuthorityExtractor:
    """Makes records out of raw documents under a policy (see the module docstring).

    ``known``: doc_ids already stored that a citation may name (``ingest --extract`` passes
    the store's); ``cache_dir``: where the LLM route and the LLM scope extractor cache their
    answers; ``max_chars``: the largest text read (a larger one is reported).
    """

    def __init__(
        self,
        policy: Policy | str | Path,
        *,
        known: Collection[str] = (),
        cache_dir: str | Path | None = None,
        max_chars: int = MAX_CHARS,
    ):
        self.policy = load_policy(policy)
        self.config = self.policy.extract
        self.known = frozenset(known)
        self.max_chars = max_chars
        self.cache_dir = cache_dir
        self._typer = DocTyper(self.config)
        self._scope = ScopeExtractor(self.policy, cache_dir=cache_dir)

    def extract(self, source: str | Path | Iterable[Any], *, name: str | None = None) -> ExtractReport:
        """Records from a raw JSONL file or from dicts (``doc_id``, ``text``, optional ``title``,
        record fields and metadata); a document that cannot be read is reported by line and
        field, the others go on."""
        if isinstance(source, (str, Path)):
            numbered: Iterable[tuple[int, Any]] = read_raw(source)
            where = name or str(source)
        else:
            numbered = enumerate(source, start=1)
            where = name or "<input>"
        report = ExtractReport()
        documents: list[RawDocument] = []
        lines: dict[str, int] = {}
        for number, item in numbered:
            for parsed in raw_documents([(number, item)], where, self.max_chars):
                if isinstance(parsed, RecordError):
                    report.errors.append(parsed)
                elif parsed.doc_id in lines:
                    report.errors.append(RecordError(where, number, parsed.doc_id, "doc_id", "duplicate doc_id in this input"))
                else:
                    documents.append(parsed)
                    lines[parsed.doc_id] = number
        ids = {d.doc_id for d in documents}
        resolver = IdentifierResolver(self.config, ids | self.known, {d.doc_id: d.title for d in documents if d.title})
        found: list[ExtractedEdge] = []
        types: dict[str, Typed] = {}
        for document in documents:
            headers, spans = header_edges(document.doc_id, document.text, resolver)
            for item in [*headers, *prose_edges(document.doc_id, document.text, resolver, spans)]:
                if isinstance(item, Skipped):
                    report.skipped.append(item)
                else:
                    found.append(item)
            types[document.doc_id] = self._typer.type_of(document)
        edges = _merge(found)
        report.cycles = _cycles(edges)
        attached: dict[str, list[Edge]] = {}
        for edge in edges.values():
            if edge.superseder in ids:
                attached.setdefault(edge.superseder, []).append(edge)
                report.edges.append(edge)
            else:
                report.unattached.append(edge)
        for document in documents:
            record = self._record(document, types[document.doc_id], attached.get(document.doc_id, []), where, lines, report)
            if record is not None:
                report.records.append(record)
        stored = {r.doc_id for r in report.records}
        report.untyped = [d for d, t in types.items() if t.source == "default" and d in stored]
        report.missing_scope = missing_scope(self.policy, report.records)
        return report

    def _record(
        self, document: RawDocument, typed: Typed, edges: list[Edge], where: str, lines: dict[str, int], report: ExtractReport
    ) -> Record | None:
        given = document.fields.get("supersedes") or []
        given_ids = {e if isinstance(e, str) else e.get("id") if isinstance(e, dict) else None for e in given}
        new = [e for e in edges if e.superseded not in given_ids]
        supersedes = [*given, *({"id": e.superseded, "confidence": e.confidence} for e in new)]
        provenance: dict[str, Any] = {
            "doc_type": {"value": typed.doc_type, "source": typed.source, "confidence": typed.confidence}
        }
        if new:
            provenance["supersedes"] = [e.as_json() for e in new]
        metadata = {**document.metadata, **({"title": document.title} if document.title else {})}
        data = {**document.fields, "doc_id": document.doc_id, "text": document.text, "doc_type": typed.doc_type}
        data.update(supersedes=supersedes, metadata={**metadata, PROVENANCE: provenance})
        line = lines.get(document.doc_id)
        try:
            record = Record.model_validate(data)
            filled, sources = self._scope.fill_one(record)
        except ValidationError as exc:
            err = exc.errors()[0]
            report.errors.append(RecordError(where, line, document.doc_id, ".".join(map(str, err["loc"])) or None, err["msg"]))
            return None
        except ScopeExtractionError as exc:
            report.errors.append(RecordError(where, line, document.doc_id, exc.field, str(exc)))
            return None
        if not sources:
            return filled
        provenance["scope"] = {
            k: {"value": filled.scope[k], "source": s, "confidence": None if s == "llm" else 1.0} for k, s in sources.items()
        }
        return filled.model_copy(update={"metadata": {**filled.metadata, PROVENANCE: provenance}})
