"""Scope for records that carry none: the policy's record-side extractors, and what still cannot fire.

A rule ``trigger ⊳ target within [keys]`` fires only between records that both carry every
key in ``within``: a disclosure stored without its ``cve_id`` can never be voided by the
release that fixes it, and without a check nothing says so. At ingest,
:class:`ScopeExtractor` fills each scope key a record lacks from the policy's
``[record_scope]`` (:class:`car_rag.policy.RecordScope`), in this order:

1. ``metadata_fields``: a free-metadata field named by the user's own framework
   (``cve_id = "cve"`` fills scope key ``cve`` from ``metadata["cve_id"]``);
2. ``patterns``: a regex over the text, read as ``scope_patterns`` reads a question (first
   group, else the whole match; the first match in the text wins; values of
   ``case_insensitive_keys`` are upper-cased so that they meet the question's);
3. ``llm``: an OpenAI-compatible endpoint asked for the keys still missing, its JSON
   validated against a schema of exactly those keys, answers cached on disk by model, keys
   and text (:mod:`car_rag.llm_endpoint`, shared with the LLM route of :mod:`car_rag.extract`).

A record's own ``scope`` always wins: an extractor never replaces a value. What is still
missing afterwards is reported per rule by :func:`missing_scope` ("rule
patch_fixes_disclosure cannot fire for 2 records: no cve_id").
"""

from __future__ import annotations

import os
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model

from car_rag.llm_endpoint import EndpointError, JSONEndpoint
from car_rag.policy import WILDCARD, LLMScopeExtractor, Policy
from car_rag.records import Record, RecordError

__all__ = ["MissingScope", "ScopeExtractionError", "ScopeExtractor", "ScopeFill", "default_cache_dir", "missing_scope"]

PROMPT_VERSION = 1
"""Part of every LLM cache key: a changed prompt must not reuse answers to the old one."""

SYSTEM_PROMPT = """\
You read one document from a corpus and return the identifiers it is about, for a retrieval \
index. Answer with a JSON object that has exactly the keys asked for. Each value is the \
identifier as the document writes it, or null when the document does not state it. Never \
guess a value the document does not contain."""


class ScopeExtractionError(ValueError):
    """An extractor could not read a record's scope; the record is reported, not stored."""

    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field = field


@dataclass(frozen=True)
class MissingScope:
    """Records of a rule's trigger or target type that lack a key of its ``within``: the
    rule can never fire for them (as trigger or as target)."""

    rule: str
    doc_ids: tuple[str, ...]
    keys: tuple[tuple[str, int], ...]
    """Each key of the rule's ``within`` that some of ``doc_ids`` lack, with how many lack it."""

    def __str__(self) -> str:
        count = len(self.doc_ids)
        lacking = ", ".join(f"no {key}" if n == count else f"no {key} ({n})" for key, n in self.keys)
        return f"rule {self.rule} cannot fire for {count} record{'s' if count != 1 else ''}: {lacking}"


def missing_scope(policy: Policy, records: Iterable[Record]) -> list[MissingScope]:
    """Per rule, the records its types concern that lack a key it needs (rules in policy order)."""
    records = list(records)
    out = []
    for rule in policy.rules:
        lacking: list[str] = []
        counts: Counter[str] = Counter()
        for record in records:
            if rule.trigger not in (WILDCARD, record.doc_type) and rule.target not in (WILDCARD, record.doc_type):
                continue
            absent = [key for key in rule.within if key not in record.scope]
            if absent:
                lacking.append(record.doc_id)
                counts.update(absent)
        if lacking:
            out.append(MissingScope(rule.name, tuple(lacking), tuple((k, counts[k]) for k in rule.within if counts[k])))
    return out


@dataclass
class ScopeFill:
    """What :meth:`ScopeExtractor.fill` did to one input."""

    records: list[Record] = field(default_factory=list)
    """The records, with filled scope where an extractor found a value (in input order)."""
    errors: list[RecordError] = field(default_factory=list)
    """Records an extractor failed on (a bad metadata value, an LLM error): not in ``records``."""
    warnings: list[str] = field(default_factory=list)
    """Extractors that matched nothing in the input (a metadata field no record has)."""
    filled: dict[str, int] = field(default_factory=dict)
    """Scope values filled, by extractor (``metadata_fields``, ``patterns``, ``llm``)."""


def default_cache_dir() -> Path:
    """Where LLM scope answers are cached outside a store: ``$XDG_CACHE_HOME/car-rag/scope-llm``."""
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "car-rag" / "scope-llm"


class ScopeExtractor:
    """Applies a policy's ``[record_scope]`` to records (see the module docstring).

    ``cache_dir`` holds the LLM's answers (a store passes its own directory; default
    :func:`default_cache_dir`). The LLM client is made on first use, so a policy without
    an ``llm`` extractor never needs the ``openai`` package.
    """

    def __init__(self, policy: Policy, *, cache_dir: str | Path | None = None):
        self.policy = policy
        self.config = policy.record_scope
        self.cache_dir = Path(cache_dir) if cache_dir is not None else default_cache_dir()
        self._patterns = {key: re.compile(pattern) for key, pattern in self.config.patterns.items()}

    @cached_property
    def _llm(self) -> _LLMScope | None:
        llm = self.config.llm
        return _LLMScope(llm, self.cache_dir) if llm is not None else None

    def fill(self, records: Sequence[Record], *, source: str = "<input>", lines: Mapping[str, int] | None = None) -> ScopeFill:
        """Fill the missing scope keys of ``records``; a record an extractor fails on becomes a
        :class:`~car_rag.records.RecordError` naming it (and its line), the others go on."""
        if not self.config.enabled:
            return ScopeFill(records=list(records))
        result = ScopeFill()
        filled: Counter[str] = Counter()
        for record in records:
            try:
                done, sources = self.fill_one(record)
            except ScopeExtractionError as exc:
                line = lines.get(record.doc_id) if lines else None
                result.errors.append(RecordError(source, line, record.doc_id, exc.field, str(exc)))
                continue
            result.records.append(done)
            filled.update(sources.values())
        result.filled = dict(filled)
        if records:
            result.warnings = [
                f"record_scope.metadata_fields.{name}: no record in {source} has metadata field {name!r} "
                f"(it fills scope key {key!r})"
                for name, key in self.config.metadata_fields.items()
                if not any(name in r.metadata for r in records)
            ]
        return result

    def fill_one(self, record: Record) -> tuple[Record, dict[str, str]]:
        """The record with its missing scope keys filled, and which extractor filled each key."""
        found: dict[str, str] = {}
        sources: dict[str, str] = {}

        def missing(key: str) -> bool:
            return key not in record.scope and key not in found

        for name, key in self.config.metadata_fields.items():
            if missing(key) and (value := _metadata_value(record, name)):
                found[key], sources[key] = value, "metadata_fields"
        for key, pattern in self._patterns.items():
            if missing(key) and (value := _first_match(pattern, record.text)):
                found[key], sources[key] = value, "patterns"
        llm = self.config.llm
        wanted = [k for k in (llm.keys or self.policy.scope_keys) if missing(k)] if llm is not None else []
        if wanted and self._llm is not None:
            for key, value in self._llm.extract(record, wanted).items():
                found[key], sources[key] = value, "llm"
        if not found:
            return record, {}
        upper = self.policy.case_insensitive_keys
        scope = {**record.scope, **{k: v.upper() if k in upper else v for k, v in found.items()}}
        try:
            return Record.model_validate({**record.model_dump(), "scope": scope}), sources
        except ValidationError as exc:
            raise ScopeExtractionError("scope", f"extracted scope {found} is not valid: {exc.errors()[0]['msg']}") from None


def _metadata_value(record: Record, name: str) -> str | None:
    value = record.metadata.get(name)
    if value is None:
        return None
    if isinstance(value, str):
        return value.strip() or None
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    raise ScopeExtractionError(
        f"metadata.{name}",
        f"record_scope.metadata_fields maps it to a scope key, but it holds "
        f"{type(value).__name__} {value!r:.60}, not one identifier (a string)",
    )


def _first_match(pattern: re.Pattern[str], text: str) -> str | None:
    for match in pattern.finditer(text):
        value = match.group(1) if pattern.groups else match.group(0)
        if value and value.strip():
            return value.strip()
    return None


class _LLMScope:
    """Scope keys asked of an OpenAI-compatible endpoint, validated, cached on disk (:mod:`car_rag.llm_endpoint`)."""

    def __init__(self, config: LLMScopeExtractor, cache_dir: Path):
        self.config = config
        self.endpoint = JSONEndpoint(
            config, cache_dir, name="LLM scope extractor", purpose="the LLM scope extractor (record_scope.llm)", prefix=""
        )

    def extract(self, record: Record, keys: Sequence[str]) -> dict[str, str]:
        """Values the endpoint found for ``keys`` (absent: it said null); raises
        :class:`ScopeExtractionError` on a timeout, a refused call or output off the schema."""
        text = record.text[: self.config.max_chars]
        try:
            parsed = self.endpoint.ask(
                [PROMPT_VERSION, self.config.model, sorted(keys), text],
                SYSTEM_PROMPT,
                f"Keys: {', '.join(keys)}\nDocument type: {record.doc_type}\n\n{text}",
                _schema(keys),
                schema_name="record_scope",
                wanted=f"JSON with keys {list(keys)}",
            )
        except EndpointError as exc:
            raise ScopeExtractionError("scope", str(exc)) from None
        return {k: v.strip() for k, v in parsed.items() if isinstance(v, str) and v.strip()}


def _schema(keys: Sequence[str]) -> type[BaseModel]:
    """A model with one required, nullable string per key (aliases: a key need not be a
    Python name) and nothing else: its JSON schema goes to the endpoint, which validates."""
    fields: dict[str, Any] = {f"key_{i}": (str | None, Field(alias=key)) for i, key in enumerate(keys)}
    model: type[BaseModel] = create_model("RecordScopeValues", __config__=ConfigDict(extra="forbid"), **fields)
    return model
