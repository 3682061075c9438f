"""``CARAuthorityTransformer``: car-rag's metadata layout for loader output, as a LangChain document transformer.

A LangChain user has loader ``Document``s: text and the loader's metadata (``source``, a page
number), no ``doc_type``, scope or ``supersedes``. This transformer reads them out of the text
with :mod:`car_rag.extract` (the policy's ``[extract]`` and ``[record_scope]`` sections) and
returns the documents with car-rag's flat layout in their metadata, ready for
``vectorstore.add_documents`` or ``index()``.

**One record per document, however it is chunked.** Documents that share a document key (the
metadata ``doc_id``, else the loader's ``source``, else the document's ``id``) are read as one
document, in order, and every one of them carries that record's ``doc_id``, type, scope and edges.
Run it before or after a text splitter. With ``index()`` and a ``RecordManager`` pass
``source_id_key="doc_id"``: the chunks of one document then share their source id, and
re-indexing a changed document with ``cleanup="incremental"`` (or ``"full"``) deletes the
chunks its old text left, so no stale chunk stays active.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from car_rag.extract import AuthorityExtractor
from car_rag.policy import Policy, load_policy
from langchain_core.documents import BaseDocumentTransformer, Document

from langchain_car.documents import document_metadata

__all__ = ["CARAuthorityTransformer"]

_LIFTED = ("published_at", "effective_at", "doc_type", "version")
"""Metadata a loader may already carry that is a record field: kept as that field."""


class CARAuthorityTransformer(BaseDocumentTransformer):
    """Extracts doc types, scope and supersession edges (with confidence) from documents' text and
    returns them with car-rag's metadata layout (see the module docstring). A document that cannot
    be read (empty, binary, an LLM failure) raises ``ValueError`` naming it.

    ``policy``: a car-rag policy, or its name or path; ``doc_id_key``: the metadata key naming a
    document (default ``doc_id``; ``source`` and the document id are the fallbacks);
    ``title_key``: the metadata key holding a title, if any.
    """

    def __init__(self, policy: Policy | str, *, doc_id_key: str = "doc_id", title_key: str = "title"):
        self.policy = load_policy(policy)
        self.doc_id_key, self.title_key = doc_id_key, title_key

    def _key(self, document: Document) -> str:
        for value in (document.metadata.get(self.doc_id_key), document.metadata.get("source"), document.id):
            if isinstance(value, str) and value.strip():
                return value
        raise ValueError(
            f"a document has no {self.doc_id_key!r} or 'source' in its metadata and no id: car-rag cannot tell "
            f"which document it is (its text starts {document.page_content[:60]!r})"
        )

    def transform_documents(self, documents: Sequence[Document], **kwargs: Any) -> Sequence[Document]:
        keys = [self._key(d) for d in documents]
        groups: dict[str, list[Document]] = {}
        for key, document in zip(keys, documents):
            groups.setdefault(key, []).append(document)
        raw = []
        for doc_id, members in groups.items():
            metadata = {k: v for k, v in members[0].metadata.items() if k != self.doc_id_key}
            lifted = {k: metadata.pop(k) for k in _LIFTED if isinstance(metadata.get(k), str)}
            title = metadata.get(self.title_key)
            text = "\n\n".join(d.page_content for d in members)
            raw.append({"doc_id": doc_id, "text": text, **lifted, "metadata": metadata, **({"title": title} if title else {})})
        report = AuthorityExtractor(self.policy).extract(raw, name="documents")
        if report.errors:
            raise ValueError("car-rag could not read these documents: " + "; ".join(str(e) for e in report.errors[:10]))
        layout = {r.doc_id: document_metadata(r) for r in report.records}
        return [
            Document(id=d.id, page_content=d.page_content, metadata={**d.metadata, **layout[k]}) for k, d in zip(keys, documents)
        ]
