"""Raw documents in, records out: doc types, scope and supersession edges with confidence.

:class:`AuthorityExtractor` reads each document's headers (:mod:`~car_rag.extract.headers`)
and prose (:mod:`~car_rag.extract.citations`), types it (:mod:`~car_rag.extract.doc_types`),
asks the optional LLM route (:mod:`~car_rag.extract.llm`) only for what the patterns left
empty (a document's type, its edges), fills scope with the policy's ``[record_scope]`` extractors (issue 22's, unchanged),
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
from car_rag.extract.llm import LLMRoute, LLMRouteError
from car_rag.extract.report import Edge, ExtractReport
from car_rag.extractors import ScopeExtractionError, ScopeExtractor, default_cache_dir, missing_scope
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
        self._llm: LLMRoute | None = None
        if self.config.llm is not None:
            types = tuple(dict.fromkeys([*(t.doc_type for t in self.config.doc_types), self.config.default_doc_type]))
            folder = Path(cache_dir) if cache_dir is not None else default_cache_dir()
            self._llm = LLMRoute(self.config.llm, types, folder)

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
        report = ExtractReport(source=where)
        documents: list[RawDocument] = []
        lines = report.lines
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
        failed: set[str] = set()
        for document in documents:
            headers, spans = header_edges(document.doc_id, document.text, resolver)
            read = [*headers, *prose_edges(document.doc_id, document.text, resolver, spans)]
            typed = self._typer.type_of(document)
            if self._llm is not None:
                try:
                    typed, more = self._ask_llm(document, typed, any(isinstance(i, ExtractedEdge) for i in read), resolver)
                except LLMRouteError as exc:
                    report.errors.append(RecordError(where, lines[document.doc_id], document.doc_id, "extract.llm", str(exc)))
                    failed.add(document.doc_id)
                    continue
                read += more
            for item in read:
                if isinstance(item, Skipped):
                    report.skipped.append(item)
                else:
                    found.append(item)
            types[document.doc_id] = typed
        documents = [d for d in documents if d.doc_id not in failed]
        report.llm_calls = self._llm.calls if self._llm is not None else 0
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

    def _ask_llm(
        self, document: RawDocument, typed: Typed, has_edges: bool, resolver: IdentifierResolver
    ) -> tuple[Typed, list[ExtractedEdge | Skipped]]:
        """The LLM route for what the patterns left empty: the type (where the policy has types to
        choose among), the edges (where no header or sentence gave one)."""
        assert self._llm is not None
        want_type = typed.source == "default" and bool(self.config.doc_types)
        if not want_type and has_edges:
            return typed, []
        answer = self._llm.ask(document.text)
        llm = self._llm.config
        if want_type and answer.doc_type is not None:
            typed = Typed(answer.doc_type, "llm", llm.doc_type_confidence)
        if has_edges:
            return typed, []
        read: list[ExtractedEdge | Skipped] = []
        doc_id = document.doc_id
        for written, backwards in [*((w, False) for w in answer.supersedes), *((w, True) for w in answer.superseded_by)]:
            evidence = f"LLM ({llm.model}): {'superseded by' if backwards else 'supersedes'} {written!r}"
            resolved = resolver.value(written)
            if not resolved:
                read.append(Skipped(doc_id, "unresolved", evidence, written))
            for cited in resolved:
                if cited.doc_id is None:
                    read.append(Skipped(doc_id, "unresolved", evidence, written, cited.candidates))
                elif cited.doc_id != doc_id:
                    pair = (cited.doc_id, doc_id) if backwards else (doc_id, cited.doc_id)
                    read.append(ExtractedEdge(pair[0], pair[1], llm.confidence, "llm", doc_id, evidence, (0, 0)))
        return typed, read

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
