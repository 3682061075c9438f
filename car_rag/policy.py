"""Policies: a domain's authority rules, written as data (TOML or JSON), not code.

A policy names its scope keys, the patterns that read scope ids out of a query, and its
rules (:mod:`car_rag.rules`: ``trigger ⊳ target within keys``, optionally ordered; explicit
``supersedes`` edges on records always count, whatever the policy).

Multi-authority (Definition 10): ``[hierarchies.NAME]`` declares ordered levels (a court
system, federal over state) read from a record's metadata field; a rule ordered
``higher_level`` fires from a higher level to a lower one, ``level_then_later`` also from
a later record of the same level. A pair two relations order both ways (a later district
ruling against an earlier supreme one) is *disputed*: neither voids the other. An
*exception* rule (``kind = "exception"``) suspends its target while the exception is
active; a record of its ``revoked_by`` type, later and in the same scope, revokes it and
the target controls again.

Optional *states* give the domain's own words to what a record of a type asserts while it
controls (``vulnerable``, ``patched``, ``good law``, ``overruled`` …) and how an answer
claims or denies that state; the reader digest and the authority guard read them. A policy
takes them inline (``[states.NAME]``) or from packaged vocabularies (``vocabulary =
["security"]``, files in ``car_rag/vocabularies/``); without states, both fall back to
neutral wording.

Optional *record-side scope extractors* (``[record_scope]``, :class:`RecordScope`) fill the
scope keys a record does not carry, at ingest: from its free metadata, from regexes over
its text, or from an LLM. A record's own scope always wins; :mod:`car_rag.extractors`
applies them.

Its ``[trust]`` section (:class:`~car_rag.trust.Trust`) says whose records may void a
tenant's: by default only the tenant's own and public records from a declared publisher.
"""

from __future__ import annotations

import json
import logging
import re
import tomllib
from functools import cached_property
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, field_validator, model_validator

from car_rag.records import Record
from car_rag.rules import EXPLICIT_RULE, LEVEL_ORDERS, Hierarchy, Rule
from car_rag.rules import WILDCARD as WILDCARD
from car_rag.rules import version_is_higher as version_is_higher
from car_rag.trust import Trust

__all__ = [
    "Hierarchy",
    "Rule",
    "State",
    "Policy",
    "PolicyArg",
    "PolicyError",
    "RecordScope",
    "LLMScopeExtractor",
    "Extraction",
    "IdentifierPattern",
    "DocTypePattern",
    "LLMExtractor",
    "load_policy",
    "builtin_policies",
    "builtin_vocabularies",
    "EXPLICIT_RULE",
]

log = logging.getLogger(__name__)


class PolicyError(ValueError):
    """A policy file or name that cannot be used."""


def _check_regex(pattern: str, where: str, *, grouped: bool = False) -> None:
    # ``grouped``: compiled as the claim reader embeds a term, inside a group, where an inline
    # flag such as "(?i)" is an error. A huge repeat count or nesting fails outside re.error.
    try:
        re.compile(f"(?:{pattern})" if grouped else pattern)
    except (re.error, OverflowError, RecursionError) as exc:
        shown = pattern if len(pattern) <= 60 else f"{pattern[:60]}..."
        raise ValueError(f"{where} is not a valid regex ({shown!r}): {exc}") from None


def _check_pattern_table(patterns: dict[str, str], where: str) -> dict[str, str]:
    """A table of scope key -> regex, each checked (``scope_patterns``, ``record_scope.patterns``)."""
    for key, pattern in patterns.items():
        _check_regex(pattern, f"{where}[{key!r}]")
    return patterns


def _check_regexes(patterns: tuple[str, ...], where: str) -> tuple[str, ...]:
    for i, pattern in enumerate(patterns):
        _check_regex(pattern, f"{where}[{i}]", grouped=where == "terms")
    return patterns


class State(BaseModel):
    """What a record of one of ``doc_types`` asserts about its scope while it controls.

    ``claims`` are regexes (case-insensitive) whose match in an answer asserts the state
    ("remains vulnerable"); ``terms`` are words whose negation denies it ("not patched",
    "hasn't been fixed", "no longer vulnerable"); a denial asserts ``opposite`` when one is
    named. Without either, the label itself serves as the only term. ``precedence`` decides
    what an answer asserting several states concludes, where the domain's rules rank them
    (an emergency exception over a blackout over a pre-clearance); without it, the lead.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    doc_types: tuple[str, ...] = Field(min_length=1, description="Record types that assert this state while active.")
    label: str = Field(default="", description="The state in the domain's words; default: the state's key.")
    opposite: str | None = Field(default=None, description="The state that denying this one asserts.")
    claims: tuple[str, ...] = Field(default=(), description="Regexes whose match in an answer asserts the state.")
    terms: tuple[str, ...] = Field(default=(), description="Words (regexes) whose negation in an answer denies the state.")
    precedence: int | None = Field(
        default=None, description="Rank among the states an answer asserts at once (highest concludes)."
    )

    @field_validator("claims", "terms")
    @classmethod
    def _compile(cls, value: tuple[str, ...], info: Any) -> tuple[str, ...]:
        return _check_regexes(value, info.field_name)


class LLMScopeExtractor(BaseModel):
    """An OpenAI-compatible chat endpoint asked for the scope keys a record still lacks, as
    JSON that must validate against a schema of those keys. Off unless a policy names one:
    it costs a call per record (cached on disk by model and text) and sends record text to
    the endpoint."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    base_url: str = Field(min_length=1, description="The endpoint, e.g. 'http://127.0.0.1:8080/v1'.")
    model: str = Field(min_length=1, description="Model name on that endpoint.")
    keys: tuple[str, ...] = Field(default=(), description="Scope keys it may fill; empty = every scope key.")
    api_key_env: str = Field(
        default="OPENAI_API_KEY", description="Environment variable holding the key ('sk-local' when unset)."
    )
    timeout_s: float = Field(default=60.0, gt=0, description="Seconds per call before the record is reported.")
    max_retries: int = Field(default=2, ge=0, description="The client's retries per call (timeouts, 5xx).")
    max_chars: int = Field(default=8000, ge=1, description="Characters of the record's text sent (the start).")
    response_format: Literal["json_schema", "json_object"] = Field(
        default="json_schema",
        description="How the schema is sent: OpenAI's strict 'json_schema', or 'json_object' with the schema beside it "
        "(the form llama-cpp-python's server takes).",
    )


class RecordScope(BaseModel):
    """Where a record's missing scope keys come from at ingest, tried in this order:
    ``metadata_fields`` (the user's own metadata names, e.g. a LangChain document's
    ``cve_id`` for scope key ``cve``), ``patterns`` (regexes over the text, the syntax of
    ``scope_patterns``: first group, else the whole match; the first match wins) and ``llm``.
    Each only fills a key the record lacks: a record's own ``scope`` always wins."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    metadata_fields: dict[str, str] = Field(
        default_factory=dict, description="Free-metadata field name -> the scope key its value fills."
    )
    patterns: dict[str, str] = Field(
        default_factory=dict, description="Scope key -> regex over the record's text (first group, else whole match)."
    )
    llm: LLMScopeExtractor | None = Field(default=None, description="An LLM asked for keys still missing; off when absent.")

    @field_validator("patterns")
    @classmethod
    def _compile(cls, value: dict[str, str]) -> dict[str, str]:
        return _check_pattern_table(value, "record_scope.patterns")

    @property
    def enabled(self) -> bool:
        """Whether any extractor is configured (most policies have none: ingest then skips this step)."""
        return bool(self.metadata_fields or self.patterns or self.llm)


class IdentifierPattern(BaseModel):
    """How documents cite each other: a regex over text (``KEP[- ]?(\\d+)``) and the doc_id
    each match names, a template whose ``{1}``, ``{2}`` … are the regex's groups (``kep-{1}``,
    ``{0}`` the whole match). With several templates the first that names a known document wins
    (an "EIP-20" citation may mean ``eip-20`` or ``erc-20``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    pattern: str = Field(min_length=1, description="Regex matching one citation of a document.")
    doc_id: tuple[str, ...] = Field(min_length=1, description="doc_id templates tried in order ('kep-{1}').")
    ignore_case: bool = Field(default=True, description="Match the pattern case-insensitively.")

    @field_validator("doc_id", mode="before")
    @classmethod
    def _one_or_many(cls, value: Any) -> Any:
        return (value,) if isinstance(value, str) else value

    @field_validator("pattern")
    @classmethod
    def _compile(cls, value: str) -> str:
        _check_regex(value, "pattern")
        return value


class DocTypePattern(BaseModel):
    """A ``doc_type`` a raw document gets when one of these regexes matches (searched, not
    anchored): its title, its text, or a metadata field. Entries are tried in order; the
    first that matches wins."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    doc_type: str = Field(min_length=1, description="The type given.")
    title: str | None = Field(default=None, description="Regex over the title (case-insensitive).")
    text: str | None = Field(default=None, description="Regex over the text (case-insensitive).")
    metadata: dict[str, str] = Field(default_factory=dict, description="Metadata field -> regex over its value.")

    @model_validator(mode="after")
    def _compiles(self) -> DocTypePattern:
        table = {"title": self.title, "text": self.text, **{f"metadata.{k}": v for k, v in self.metadata.items()}}
        named = {k: v for k, v in table.items() if v is not None}
        if not named:
            raise ValueError(f"doc type {self.doc_type!r} needs at least one of title, text, metadata")
        for where, pattern in named.items():
            _check_regex(pattern, where)
        return self


class LLMExtractor(LLMScopeExtractor):
    """The LLM route of ``car-rag extract``: asked only for what the patterns left empty (the
    doc_type, the documents a text says it supersedes); its answers carry ``confidence``."""

    confidence: float = Field(
        default=0.45,
        ge=0.0,
        le=1.0,
        description="Confidence of an edge the LLM names (default below τ 0.5: it contests until measured).",
    )
    doc_type_confidence: float = Field(default=0.6, ge=0.0, le=1.0, description="Confidence of a doc_type it gives.")


class Extraction(BaseModel):
    """How ``car-rag extract`` reads authority out of raw documents (:mod:`car_rag.extract`):
    citation identifiers, aliases and titles that resolve a cited document, doc-type patterns,
    the type of a document none matches, and an optional LLM route."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    identifiers: tuple[IdentifierPattern, ...] = Field(default=(), description="Citation patterns -> doc_id.")
    aliases: dict[str, str] = Field(default_factory=dict, description="A name the texts use -> the doc_id it means.")
    titles: bool = Field(default=True, description="Resolve a cited document by its exact title too.")
    doc_types: tuple[DocTypePattern, ...] = Field(default=(), description="Doc-type patterns, first match wins.")
    default_doc_type: str = Field(default="document", min_length=1, description="The type of a document no pattern types.")
    llm: LLMExtractor | None = Field(default=None, description="An LLM for what the patterns leave empty; off when absent.")


def builtin_vocabularies() -> list[str]:
    """Names of the packaged state vocabularies a policy can include (``vocabulary = [...]``)."""
    folder = resources.files("car_rag") / "vocabularies"
    return sorted(p.name[: -len(".toml")] for p in folder.iterdir() if p.name.endswith(".toml"))


def _vocabulary_states(name: str) -> dict[str, Any]:
    if name not in builtin_vocabularies():
        raise ValueError(f"unknown vocabulary {name!r}; packaged: {builtin_vocabularies()}")
    text = (resources.files("car_rag") / "vocabularies" / f"{name}.toml").read_text(encoding="utf-8")
    states: dict[str, Any] = tomllib.loads(text).get("states", {})
    return states


class Policy(BaseModel):
    """A domain's authority rules and how to read scope ids out of a query.

    A policy may have no rules: records' explicit ``supersedes`` edges count under any
    policy, so a corpus that states its own supersession needs none (and a policy that only
    carries states for reading answers has none). A policy file must still say so with
    ``rules = []``, so that a forgotten ``[[rules]]`` section is an error, not a policy that
    voids nothing.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1)
    description: str = ""
    scope_keys: tuple[str, ...] = Field(
        min_length=1, description="Entity keys that define a record's scope (its entity-index bucket)."
    )
    rules: tuple[Rule, ...] = Field(
        default=(), description="Supersession rules; explicit edges always count too, so none is a valid choice."
    )
    scope_patterns: dict[str, str] = Field(
        default_factory=dict,
        description="Scope key -> regex pulling that key's value out of a query (first group, else whole match).",
    )
    case_insensitive_keys: tuple[str, ...] = Field(
        default=(), description="Scope keys whose query matches are compared case-insensitively (upper-cased)."
    )
    vocabulary: tuple[str, ...] = Field(
        default=(), description="Packaged state vocabularies to include (car_rag/vocabularies/<name>.toml)."
    )
    states: dict[str, State] = Field(
        default_factory=dict, description="State name -> what records of its types assert; adds to the vocabularies."
    )
    record_scope: RecordScope = Field(
        default_factory=RecordScope, description="Extractors filling the scope keys records lack, at ingest."
    )
    hierarchies: dict[str, Hierarchy] = Field(
        default_factory=dict, description="Name -> ordered levels that rules with a level order compare in."
    )
    extract: Extraction = Field(
        default_factory=Extraction, description="How car-rag extract reads doc types and edges out of raw text."
    )
    trust: Trust = Field(default_factory=Trust, description="Whose records may void whose across tenants (car_rag.trust).")

    @model_validator(mode="before")
    @classmethod
    def _include_vocabularies(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("vocabulary"):
            names = data["vocabulary"]
            if isinstance(names, str) or not isinstance(names, (list, tuple)):
                raise ValueError("vocabulary: must be a list of names")
            states = data.get("states") or {}
            if not isinstance(states, dict):
                raise ValueError("states: must be a table of state name -> state")
            merged: dict[str, Any] = {}
            for name in names:
                merged.update(_vocabulary_states(name))
            data = {**data, "states": {**merged, **states}}
        return data

    @field_validator("scope_keys")
    @classmethod
    def _distinct_keys(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        blank = [k for k in value if not k.strip()]
        if blank:
            raise ValueError(f"scope keys must not be empty or white space, got {blank}")
        repeated = sorted({k for k in value if value.count(k) > 1})
        if repeated:
            raise ValueError(f"scope keys must be unique, repeated: {repeated}")
        return value

    @field_validator("scope_patterns")
    @classmethod
    def _compile(cls, value: dict[str, str]) -> dict[str, str]:
        return _check_pattern_table(value, "scope_patterns")

    @model_validator(mode="after")
    def _keys_known(self) -> Policy:
        names = [r.name for r in self.edge_rules]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(
                f"rules: rule names must be unique (an exception's revocation is named <rule>_revoked), repeated: {dupes}"
            )
        for i, rule in enumerate(self.rules):
            if rule.hierarchy is not None and rule.hierarchy not in self.hierarchies:
                raise ValueError(
                    f"rules.{i}.hierarchy: rule {rule.name!r} names unknown hierarchy {rule.hierarchy!r}; "
                    f"declared: {sorted(self.hierarchies)}"
                )
            unknown = [k for k in rule.within if k not in self.scope_keys]
            if unknown:
                raise ValueError(
                    f"rules.{i}.within: rule {rule.name!r} uses keys {unknown} that are not in scope_keys {list(self.scope_keys)}"
                )
        for field in ("scope_patterns", "case_insensitive_keys"):
            for key in getattr(self, field):
                if key not in self.scope_keys:
                    raise ValueError(f"{field}: names key {key!r} that is not in scope_keys")
        extractors = self.record_scope
        named = [(f"record_scope.patterns.{k}", k) for k in extractors.patterns]
        named += [(f"record_scope.metadata_fields.{f}", k) for f, k in extractors.metadata_fields.items()]
        named += [("record_scope.llm.keys", k) for k in (extractors.llm.keys if extractors.llm else ())]
        for where, key in named:
            if key not in self.scope_keys:
                raise ValueError(f"{where}: names key {key!r} that is not in scope_keys {list(self.scope_keys)}")
        owner: dict[str, str] = {}
        for name, state in self.states.items():
            if state.opposite is not None and state.opposite not in self.states:
                raise ValueError(f"states.{name}.opposite: {state.opposite!r} is not a state of this policy")
            for doc_type in state.doc_types:
                if doc_type in owner:
                    raise ValueError(f"states.{name}.doc_types: {doc_type!r} is also in state {owner[doc_type]!r}")
                owner[doc_type] = name
        return self

    @cached_property
    def _state_by_type(self) -> dict[str, str]:
        return {t: name for name, state in self.states.items() for t in state.doc_types}

    def state_of(self, doc_type: str) -> str | None:
        """The state a record of ``doc_type`` asserts while it controls, if the policy names one."""
        return self._state_by_type.get(doc_type)

    def state_label(self, name: str) -> str:
        """A state's words for a reader: its label, else its key with spaces."""
        state = self.states[name]
        return state.label or name.replace("_", " ")

    @cached_property
    def _patterns(self) -> dict[str, re.Pattern[str]]:
        return {k: re.compile(p) for k, p in self.scope_patterns.items()}

    def scope_ids_in(self, query: str) -> dict[str, list[str]]:
        """Scope values named in the query text, by key (e.g. {'cve_id': ['CVE-2019-10744']})."""
        found: dict[str, list[str]] = {}
        for key, pattern in self._patterns.items():
            values = []
            for match in pattern.finditer(query):
                value = match.group(1) if pattern.groups else match.group(0)
                if key in self.case_insensitive_keys:
                    value = value.upper()
                if value not in values:
                    values.append(value)
            if values:
                found[key] = values
        return found

    @cached_property
    def edge_rules(self) -> tuple[Rule, ...]:
        """The rules that make edges: the policy's own, then each exception's revocation."""
        return self.rules + tuple(r for rule in self.rules if (r := rule.revocation()) is not None)

    @cached_property
    def _rules_by_name(self) -> dict[str, Rule]:
        return {r.name: r for r in self.edge_rules}

    @cached_property
    def exception_rules(self) -> frozenset[str]:
        """Names of the exception rules: their edges suspend a target only while the trigger is active."""
        return frozenset(r.name for r in self.rules if r.kind == "exception")

    @cached_property
    def hierarchical_rules(self) -> frozenset[str]:
        """Names of the rules ordered by a hierarchy: where one orders a pair against another rule, it is disputed."""
        return frozenset(r.name for r in self.rules if r.order in LEVEL_ORDERS)

    def hierarchy_of(self, rule: Rule) -> Hierarchy | None:
        return self.hierarchies.get(rule.hierarchy) if rule.hierarchy is not None else None

    def fires(self, rule: Rule, trigger: Record, target: Record) -> bool:
        """Whether ``rule`` of this policy makes ``trigger`` supersede ``target``."""
        return rule.fires(trigger, target, self.hierarchy_of(rule))

    def edges_between(self, trigger: Record, target: Record) -> list[str]:
        """Names of every rule (or the explicit edge) by which ``trigger`` supersedes ``target``."""
        names = [EXPLICIT_RULE] if target.doc_id in trigger.supersedes else []
        names.extend(r.name for r in self.edge_rules if self.fires(r, trigger, target))
        return names

    def rule(self, name: str) -> Rule | None:
        return self._rules_by_name.get(name)


def builtin_policies() -> list[str]:
    """Names of the policies shipped with car-rag."""
    folder = resources.files("car_rag") / "policies"
    return sorted(p.name[: -len(".toml")] for p in folder.iterdir() if p.name.endswith(".toml"))


def _parse(text: str, suffix: str, origin: str) -> Policy:
    try:
        data = json.loads(text) if suffix == ".json" else tomllib.loads(text)
    except RecursionError:
        raise PolicyError(f"{origin}: cannot parse: nested too deeply") from None
    except ValueError as exc:  # a syntax error, or an integer too long to convert
        raise PolicyError(f"{origin}: cannot parse: {exc}") from exc
    problems: list[str] = []
    if isinstance(data, dict) and "rules" not in data:
        # A forgotten [[rules]] section would load as a policy that voids nothing.
        problems.append(
            "rules: missing; write `rules = []` for a policy whose only supersession is the records' explicit `supersedes` edges"
        )
    try:
        policy = Policy.model_validate(data)
    except ValidationError as exc:
        problems += [f"{'.'.join(map(str, e['loc']))}: {e['msg']}" if e["loc"] else e["msg"] for e in exc.errors()]
    if problems:
        raise PolicyError(f"{origin}: invalid policy: {'; '.join(problems)}")
    return policy


def load_policy(name_or_path: str | Path | Policy) -> Policy:
    """A built-in policy by name, or a policy file (``.toml`` or ``.json``)."""
    if isinstance(name_or_path, Policy):
        return name_or_path
    path = Path(name_or_path)
    if path.suffix in (".toml", ".json"):
        if not path.is_file():
            raise PolicyError(f"policy file not found: {path}")
        try:
            # utf-8-sig: a byte-order mark some editors write is not part of the policy.
            text = path.read_bytes().decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            raise PolicyError(f"{path}: cannot parse: not UTF-8: {exc.reason} at byte {exc.start}") from None
        policy = _parse(text, path.suffix, str(path))
        log.debug("loaded policy %r from %s: %d rules", policy.name, path, len(policy.rules))
        return policy
    name = str(name_or_path)
    if name not in builtin_policies():
        raise PolicyError(f"unknown policy {name!r}: use a .toml/.json file or one of {builtin_policies()}")
    text = (resources.files("car_rag") / "policies" / f"{name}.toml").read_text(encoding="utf-8")
    policy = _parse(text, ".toml", f"built-in policy {name!r}")
    log.debug("loaded built-in policy %r: %d rules", name, len(policy.rules))
    return policy


PolicyArg = Annotated[Policy, BeforeValidator(lambda v: load_policy(v) if isinstance(v, (str, Path)) else v)]
"""A pydantic field type taking a :class:`Policy`, or the name or path of one (integrations'
retrievers and postprocessors declare their ``policy`` with it)."""
