"""The flat-metadata layout: a record as one flat metadata dict, and back; the ``car_*`` keys.

Vector stores keep metadata flat, so this layout is the contract between a store the user
runs and Stage 2: every framework adapter writes records with :meth:`RecordLayout.metadata`
and reads what its store returns with :meth:`RecordLayout.record`. Values are str, int,
float or bool; free metadata is kept as JSON (exact) and, where scalar, flat too; lists
(``supersedes``, ``allowed_principals``, ``car_scope_keys``) are JSON
strings, or native lists for stores that hold list metadata (Chroma itself, where Stage 2
can then ask for ``supersedes`` containing an id). The reader accepts both, and metadata
written by others as long as it carries ``doc_type`` and the policy's scope keys flat.

The ``car_*`` annotation keys say what resolution decided for each returned item; they are
defined once here so every integration writes, and reads back, the same ones.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from car_rag.eligibility import governance_metadata
from car_rag.policy import Policy
from car_rag.records import Record

__all__ = [
    "CAR_AMBIGUITY",
    "CAR_ANCHOR_ID",
    "CAR_ANNOTATION_KEYS",
    "CAR_CONTESTED_BY",
    "CAR_DISPUTED_BY",
    "CAR_HIDDEN_SUPERSEDER",
    "CAR_FILTERED_SUPERSEDER",
    "CAR_POLICY",
    "CAR_PREFIX",
    "CAR_QUERY",
    "CAR_RANK",
    "CAR_ROLE",
    "CAR_RULE",
    "CAR_SCOPE_PROBABILITY",
    "CAR_STAGE1_CHANNEL",
    "CAR_STAGE1_RANK",
    "CAR_STAGE1_SCORE",
    "CAR_STATUS",
    "CAR_SUPERSEDED_BY",
    "CAR_VOIDED_BY",
    "CAR_VOIDS",
    "LAYOUT_KEYS",
    "LAYOUT_VERSION",
    "LayoutError",
    "RecordLayout",
    "decode_list",
]

LAYOUT_VERSION = 2
"""Written as ``car_layout`` on every record; a reader refuses metadata from a newer layout.
2 added ``car_supersedes_confidence``: a reader of layout 1 would take a weak edge as certain,
so it must refuse such records rather than read them; records of layout 1 read as before."""
CAR_PREFIX = "car_"
"""car-rag's own metadata keys (layout and annotations) start with this; never free metadata."""

CAR_STATUS = "car_status"
"""'active', 'superseded', or 'unresolved' (an item without car-rag metadata, passed through)."""
CAR_ROLE = "car_role"
"""'anchor' (a Stage-1 hit), 'superseder' (brought in by Stage 2) or 'scope_match' (in the scope of an id the query names)."""
CAR_RANK = "car_rank"
"""1-based rank of the record in the resolved result."""
CAR_ANCHOR_ID = "car_anchor_id"
"""doc_id of the anchor whose authority chain brought the record in."""
CAR_SUPERSEDED_BY = "car_superseded_by"
"""doc_ids of the active records that void this one (the ones that control)."""
CAR_RULE = "car_rule"
"""For a superseded record: the rule (or 'explicit') of the edge that set its status."""
CAR_VOIDED_BY = "car_voided_by"
"""Every record in the result that voids this one, as links (doc_id, rule, doc_type, version, scope, status, and
``confidence`` where the edge is less than certain)."""
CAR_VOIDS = "car_voids"
"""Records in the result this one voids, as links like :data:`CAR_VOIDED_BY`'s."""
CAR_CONTESTED_BY = "car_contested_by"
"""Records in the result that void this one only with too little confidence to count, as links
like :data:`CAR_VOIDED_BY`'s with their ``confidence``: the record is active, possibly superseded."""
CAR_DISPUTED_BY = "car_disputed_by"
"""Records in the result that void this one by one relation while it voids them by another
(Definition 10), as links like :data:`CAR_VOIDED_BY`'s: neither voids the other."""
CAR_HIDDEN_SUPERSEDER = "car_hidden_superseder"
"""True when the record is voided by one the caller may not read (never named)."""
CAR_FILTERED_SUPERSEDER = "car_filtered_superseder"
"""True when the record is voided by one the query's ``as_of`` or filters leave out (not shown)."""
CAR_STAGE1_RANK = "car_stage1_rank"
"""1-based Stage-1 position, None when Stage 1 did not return it."""
CAR_STAGE1_SCORE = "car_stage1_score"
"""The Stage-1 retriever's own score, None when it gave none or did not return the record."""
CAR_STAGE1_CHANNEL = "car_stage1_channel"
"""Name of the Stage-1 retriever, None when Stage 1 did not return the record."""
CAR_POLICY = "car_policy"
"""Name of the policy the record was resolved under."""
CAR_QUERY = "car_query"
"""The query it was resolved for."""
CAR_SCOPE_PROBABILITY = "car_scope_probability"
"""How probable it is that the question is about this record's scope (None: not estimated)."""
CAR_AMBIGUITY = "car_ambiguity"
"""The result's ambiguity (:meth:`car_rag.ambiguity.Ambiguity.to_dict`), on every item; None when one
scope is clearly the question's subject or no posterior was estimated."""

CAR_ANNOTATION_KEYS = (
    CAR_STATUS,
    CAR_ROLE,
    CAR_RANK,
    CAR_ANCHOR_ID,
    CAR_SUPERSEDED_BY,
    CAR_RULE,
    CAR_VOIDED_BY,
    CAR_VOIDS,
    CAR_CONTESTED_BY,
    CAR_DISPUTED_BY,
    CAR_HIDDEN_SUPERSEDER,
    CAR_FILTERED_SUPERSEDER,
    CAR_STAGE1_RANK,
    CAR_STAGE1_SCORE,
    CAR_STAGE1_CHANNEL,
    CAR_POLICY,
    CAR_QUERY,
    CAR_SCOPE_PROBABILITY,
    CAR_AMBIGUITY,
)

_LISTS = ("supersedes", "allowed_principals")
_OPTIONAL = ("published_at", "effective_at", "version", "source", "uri", "authority", "tenant")
_SCOPE_KEYS, _METADATA_JSON, _LAYOUT = "car_scope_keys", "car_metadata_json", "car_layout"
_PUBLISHER = "car_publisher"
"""A public record's publisher (car_rag.trust): under a car_ key, so that no framework metadata
that happens to be called 'publisher' is taken for one."""
_EDGE_CONFIDENCE = "car_supersedes_confidence"
"""JSON object: the confidence of each ``supersedes`` id below 1 (the list itself stays ids, so a
store can still be asked which records name an id)."""
LAYOUT_KEYS = frozenset(
    {
        "doc_id",
        "doc_type",
        *_OPTIONAL,
        *_LISTS,
        "car_tenant",
        "car_public",
        _SCOPE_KEYS,
        _METADATA_JSON,
        _LAYOUT,
        _EDGE_CONFIDENCE,
        _PUBLISHER,
    }
)
"""Keys the layout uses for record fields: a scope key may not take one of these names."""


class LayoutError(ValueError):
    """Metadata that cannot be read as a record (or a record that cannot be laid out flat)."""


def decode_list(value: Any) -> list[str]:
    """A list of ids from native list metadata, a JSON-encoded list, or one plain string."""
    if value is None:
        return []
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("["):
            decoded = json.loads(text)
            if isinstance(decoded, list):
                return [str(v) for v in decoded]
        return [text] if text else []
    if isinstance(value, (list, tuple)):
        return [str(v) for v in value]
    raise LayoutError(f"expected a list of ids, got {type(value).__name__}")


class RecordLayout(BaseModel):
    """Where a record's fields live in flat metadata. The defaults are car-rag's own layout."""

    model_config = ConfigDict(frozen=True)

    doc_id_key: str = Field(
        default="doc_id", description="Metadata key holding the record id; when absent, the store's own id is used."
    )
    doc_type_key: str = Field(default="doc_type", description="Metadata key holding the record's doc_type.")
    json_lists: bool = Field(
        default=True,
        description="Write list fields as JSON strings (for stores that only accept scalar metadata); "
        "False writes native lists, which a store such as Chroma can filter with $contains.",
    )

    # ------------------------------------------------------------------ writing
    def metadata(self, record: Record) -> dict[str, Any]:
        """Flat metadata carrying every field of ``record`` but its text."""
        clash = sorted(k for k in record.scope if k in self._reserved() or k.startswith(CAR_PREFIX))
        if clash:
            raise LayoutError(f"record {record.doc_id!r}: scope keys {clash} collide with the metadata layout")
        meta: dict[str, Any] = {self.doc_id_key: record.doc_id, self.doc_type_key: record.doc_type}
        for name in _OPTIONAL:
            value = getattr(record, name)
            if value is not None:
                meta[name] = value.isoformat() if name.endswith("_at") else value
        lists = {"supersedes": record.supersedes, _SCOPE_KEYS: list(record.scope)}
        lists.update({k: v for k, v in governance_metadata(record).items() if isinstance(v, list)})
        for name, values in lists.items():
            if values:  # Chroma rejects empty lists: an absent key reads as empty
                meta[name] = json.dumps(list(values), ensure_ascii=False) if self.json_lists else list(values)
        if record.supersedes_confidence:
            meta[_EDGE_CONFIDENCE] = json.dumps(record.supersedes_confidence, ensure_ascii=False, sort_keys=True)
        meta.update({k: v for k, v in governance_metadata(record).items() if not isinstance(v, list)})
        if record.publisher is not None:
            meta[_PUBLISHER] = record.publisher
        meta.update(record.scope)
        if record.metadata:
            # Exact round trip from the JSON; scalar values also flat, so a user's store can
            # filter on them and a framework shows them to its LLM as it does any metadata.
            meta[_METADATA_JSON] = json.dumps(record.metadata, ensure_ascii=False, sort_keys=True)
            reserved = self._reserved() | set(record.scope)
            meta.update(
                {
                    k: v
                    for k, v in record.metadata.items()
                    if isinstance(v, (str, int, float, bool)) and k not in reserved and not k.startswith(CAR_PREFIX)
                }
            )
        meta[_LAYOUT] = LAYOUT_VERSION
        return meta

    def _reserved(self) -> frozenset[str]:
        return LAYOUT_KEYS | {self.doc_id_key, self.doc_type_key}

    # ------------------------------------------------------------------ reading
    def doc_id(self, meta: Mapping[str, Any], default: str | None) -> str | None:
        """The record id in ``meta``, else ``default`` (the store's own id for the item)."""
        value = meta.get(self.doc_id_key)
        return value if isinstance(value, str) and value and value != "None" else default

    def doc_type(self, meta: Mapping[str, Any]) -> str | None:
        value = meta.get(self.doc_type_key)
        return value if isinstance(value, str) and value else None

    def record(
        self,
        meta: Mapping[str, Any],
        text: str,
        policy: Policy | None,
        *,
        default_id: str | None = None,
        foreign_keys: frozenset[str] = frozenset(),
    ) -> Record:
        """The record ``meta`` describes, with ``text``. Scope keys are those ``car_scope_keys``
        lists, else the ``policy``'s present in ``meta``; a key still missing is read from the
        metadata field the policy's ``record_scope.metadata_fields`` maps to it; keys outside the layout (and not in
        ``foreign_keys``, the store's own bookkeeping) are free metadata unless
        ``car_metadata_json`` carries it. Raises :class:`LayoutError` naming record and field."""
        doc_id = self.doc_id(meta, default_id)
        if not doc_id:
            raise LayoutError(f"item has no {self.doc_id_key!r} metadata and no id: {text[:60]!r}")
        version = meta.get(_LAYOUT, LAYOUT_VERSION)
        if not isinstance(version, int) or version > LAYOUT_VERSION:
            raise LayoutError(f"record {doc_id!r}: field {_LAYOUT!r}: layout {version!r} is newer than {LAYOUT_VERSION}")
        doc_type = self.doc_type(meta)
        if doc_type is None:
            raise LayoutError(f"record {doc_id!r} has no {self.doc_type_key!r} metadata: car-rag cannot apply a policy to it")
        try:
            fields = self._fields(meta, policy, foreign_keys)
        except (LayoutError, ValueError) as exc:  # a bad JSON list or metadata string
            raise LayoutError(f"record {doc_id!r}: metadata is not a valid car-rag record: {exc}") from None
        try:
            return Record.model_validate({"doc_id": doc_id, "doc_type": doc_type, "text": text, **fields})
        except ValidationError as exc:
            details = "; ".join(f"field {'.'.join(map(str, e['loc']))!r}: {e['msg']}" for e in exc.errors())
            raise LayoutError(f"record {doc_id!r}: metadata is not a valid car-rag record: {details}") from None

    def _fields(self, meta: Mapping[str, Any], policy: Policy | None, foreign_keys: frozenset[str]) -> dict[str, Any]:
        if _SCOPE_KEYS in meta:
            scope_keys = decode_list(meta[_SCOPE_KEYS])
        else:
            scope_keys = [k for k in (policy.scope_keys if policy is not None else ()) if k in meta]
        scope = {k: str(meta[k]) for k in scope_keys if meta.get(k) not in (None, "")}
        if policy is not None:
            # The framework's own metadata names (record_scope.metadata_fields), for keys the
            # record does not carry under the scope key's name.
            for name, key in policy.record_scope.metadata_fields.items():
                if key not in scope and meta.get(name) not in (None, ""):
                    scope[key] = str(meta[name])
        fields: dict[str, Any] = {
            "scope": scope,
            **{name: decode_list(meta.get(name)) for name in _LISTS},
        }
        if meta.get(_EDGE_CONFIDENCE):
            weak = json.loads(meta[_EDGE_CONFIDENCE])
            if not isinstance(weak, dict):
                raise LayoutError(f"field {_EDGE_CONFIDENCE!r}: expected a JSON object of id -> confidence")
            fields["supersedes"] = [{"id": d, "confidence": weak[d]} if d in weak else d for d in fields["supersedes"]]
        if meta.get(_PUBLISHER):
            fields["publisher"] = meta[_PUBLISHER]
        for name in _OPTIONAL:
            value = meta.get(name)
            if value is not None and value != "":
                numeric = name == "authority" and isinstance(value, (int, str)) and not isinstance(value, bool)
                fields[name] = float(value) if numeric else value
        if _METADATA_JSON in meta:
            fields["metadata"] = json.loads(meta[_METADATA_JSON])
        else:
            skip = self._reserved() | set(scope_keys) | foreign_keys
            fields["metadata"] = {k: v for k, v in meta.items() if k not in skip and not k.startswith(CAR_PREFIX)}
        return fields

    def evidence_record(
        self,
        meta: Mapping[str, Any],
        text: str,
        policy: Policy | None,
        *,
        default_id: str,
        foreign_keys: frozenset[str] = frozenset(),
    ) -> Record:
        """:meth:`record`, or, for metadata that is not car-rag's, an untyped record that is
        still evidence (type ``doc_type`` if given, else ``document``)."""
        try:
            return self.record(meta, text, policy, default_id=default_id, foreign_keys=foreign_keys)
        except LayoutError:
            doc_id = self.doc_id(meta, default_id) or default_id
            return Record(doc_id=doc_id, text=text, doc_type=str(meta.get(self.doc_type_key) or "document"))
