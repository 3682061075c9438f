"""A store's configuration: what a new store is made with, and what opening one checks.

It is ``car-store.json`` in a store's folder, or the ``store`` row of a store on PostgreSQL: the
policy, the embedding model and the encoder, device and precision that built its vectors (with
their vectors of a few probe texts, see :func:`check_parity`), where the vectors are (Chroma, embedded or a server, or
pgvector) with their HNSW settings, the BM25 backend, and the format version. A store keeps what
it was made with; opening it with a policy that resolves differently is refused, unless that
policy only adds rules that pair no stored record (:func:`added_rules`, :func:`pairing_rules`).
"""

from __future__ import annotations

import base64
import json
import logging
import uuid
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from car_rag.embedding import Embedder
from car_rag.onnx_encoder import PARITY_TEXTS
from car_rag.policy import Policy, Rule
from car_rag.postgres import VectorColumn
from car_rag.records import Record

if TYPE_CHECKING:  # chromadb is the [store] extra's; the settings are Chroma's own, typed as it types them
    from chromadb.api.collection_configuration import CreateHNSWConfiguration

__all__ = [
    "CONFIG_FILE",
    "DEFAULT_HNSW",
    "DEFAULT_PGVECTOR_HNSW",
    "PARITY_MIN_COSINE",
    "FORMAT_VERSION",
    "StoreError",
    "VECTOR_STORES",
    "added_rules",
    "built_encoder",
    "check_options",
    "check_parity",
    "checked",
    "new_config",
    "pairing_rules",
    "read_config",
    "vector_column",
    "vector_store_of",
    "vectors_at",
    "write_config",
]

log = logging.getLogger(__package__)

CONFIG_FILE = "car-store.json"
FORMAT_VERSION = 1
DEFAULT_HNSW: CreateHNSWConfiguration = {"space": "cosine", "ef_construction": 200, "ef_search": 200, "max_neighbors": 32}
"""Chroma's defaults (ef 100, M 16) lose up to 9 of the exact top 10 on templated corpora with
duplicate texts (measured on ghsa-freeform); these keep search near exact at ~0.3 ms/query."""
VECTOR_STORES = ("chroma", "pgvector")
"""Where a store's vectors are searched past the exact limit: a Chroma collection (embedded, or a
server), or pgvector in the PostgreSQL of a shared store (its records' own table)."""
DEFAULT_PGVECTOR_HNSW = {"space": "cosine", "ef_construction": 200, "ef_search": 400, "max_neighbors": 32}
"""pgvector's HNSW index in Chroma's words (``max_neighbors`` is pgvector's ``m``). On 100k templated
records (``evals/results/serve/pgvector-100k.md``) pgvector's index defaults (m 16, ef_construction 64)
found 0.72-0.89 of the exact top 10 at ef_search 100-400; with Chroma's values above its graph found
0.87-0.90 (two builds) against Chroma's 0.95; ef_search 400 finds 0.94-0.96 at 6 ms p50, 800 0.99 at 12."""


PARITY_MIN_COSINE = 0.9999
"""A store opened by another encoder, device or precision than built it is refused unless that
embedder's vectors of the store's probe texts are within this cosine of the stored ones: the
ONNX and PyTorch encoders agree to 0.999999 on every benchmark text (``evals/results/onnx_parity``),
and GPU against CPU fp32 to 0.9999999 (issue 36); a different model, or fp16 where it drifts,
falls below it."""


class StoreError(RuntimeError):
    """A store that cannot be opened or written as asked."""


def vector_store_of(config: Mapping[str, Any]) -> str:
    """The engine a store's vectors are in (its configuration); stores from before the field: Chroma."""
    return str(config.get("vector_store", "chroma"))


def vectors_at(config: Mapping[str, Any]) -> str:
    """Where a store's vectors are, for messages."""
    if vector_store_of(config) == "pgvector":
        return "pgvector beside its records"
    return f"Chroma at {config['chroma_url']}" if config.get("chroma_url") else "embedded Chroma"


def vector_column(config: Mapping[str, Any]) -> VectorColumn:
    """The pgvector column and HNSW index of a store on pgvector, from its configuration."""
    hnsw = config["hnsw"]
    if set(hnsw) - set(DEFAULT_PGVECTOR_HNSW) or hnsw["space"] != "cosine":
        raise StoreError(f"pgvector's HNSW index takes {sorted(DEFAULT_PGVECTOR_HNSW)} with space 'cosine', got {hnsw}")
    return VectorColumn(config["vector_dimension"], hnsw["max_neighbors"], hnsw["ef_construction"])


def built_encoder(config: Mapping[str, Any]) -> str:
    """The encoder a store's vectors came from (its ``car-store.json``); stores from before the field: PyTorch."""
    return str(config.get("encoder", "torch"))


def built_by(config: Mapping[str, Any]) -> dict[str, str]:
    """The encoder, device kind and precision a store's vectors came from (as :attr:`Embedder.build`);
    stores from before the device and precision fields were built on CPU in fp32."""
    return {"encoder": built_encoder(config), "device": config.get("device", "cpu"), "precision": config.get("precision", "fp32")}


def _described(build: Mapping[str, str]) -> str:
    return f"the {build['encoder']!r} encoder on {build['device']} in {build['precision']}"


def probes(embedder: Embedder) -> dict[str, Any]:
    """The probe texts and this embedder's vectors of them (float32, little-endian, base64), which a
    new store records so that another embedder's parity can be checked when it opens the store."""
    vectors = np.asarray(embedder.parity_vectors, dtype="<f4")
    return {"texts": list(PARITY_TEXTS), "vectors": base64.b64encode(vectors.tobytes()).decode("ascii")}


def check_parity(config: Mapping[str, Any], embedder: Embedder, where: str) -> None:
    """Refuse ``embedder`` for the store at ``where`` unless it is the build that made the store's
    vectors, or its vectors of the store's probe texts are within :data:`PARITY_MIN_COSINE` of the
    stored ones (it then encodes them, once, as it opens the store). A store from before the probes
    takes only its own build."""
    built = built_by(config)
    if embedder.build == built:
        return
    asked = _described(embedder.build)
    recorded = config.get("probes")
    if recorded is None:
        raise StoreError(
            f"store {where} was built with {_described(built)} and records no probe vectors to check another "
            f"against (it predates them); this process asked for {asked}. Open it with --encoder "
            f"{built['encoder']} --device {built['device']} (encoder={built['encoder']!r}), or ingest into a new store"
        )
    stored = np.frombuffer(base64.b64decode(recorded["vectors"]), dtype="<f4").reshape(len(recorded["texts"]), -1)
    fresh = embedder.encode_with_model(recorded["texts"])
    cosine = float((stored * fresh).sum(axis=1).min()) if fresh.shape == stored.shape else float("nan")
    if not cosine >= PARITY_MIN_COSINE:  # nan (another dimension) included
        raise StoreError(
            f"store {where} was built with {_described(built)}; this process asked for {asked}, whose vectors of the "
            f"store's probe texts are not the stored ones (cosine {cosine:.6f}, needed {PARITY_MIN_COSINE}): one store "
            f"holds one encoder's vectors. Open it with --encoder {built['encoder']} --device {built['device']} "
            f"--precision {built['precision']}, or ingest into a new store"
        )
    log.info("store %s: built with %s, opened with %s (probe cosine %.7f)", where, _described(built), asked, cosine)


def check_options(
    embedder: Embedder | None,
    encoder: str | None,
    vector_store: str | None,
    chroma_url: str | None,
    authority_url: str | None,
    authority_schema: str | None,
) -> None:
    """Refuse options of :meth:`~car_rag.store.CARStore.open` that contradict each other, before anything is made."""
    if embedder is not None and encoder is not None and embedder.encoder != encoder:
        raise ValueError(f"encoder={encoder!r} contradicts the embedder given ({embedder.encoder!r})")
    if vector_store not in (None, *VECTOR_STORES):
        raise ValueError(f"vector_store must be one of {', '.join(VECTOR_STORES)}, got {vector_store!r}")
    if vector_store == "pgvector" and (chroma_url is not None or authority_url is None):
        raise ValueError(
            "vector_store='pgvector' keeps the vectors beside the records of a store on PostgreSQL: "
            "pass authority_url (--authority-url), and no chroma_url"
        )
    if authority_schema is not None and authority_url is None:
        raise ValueError("authority_schema names a schema of the PostgreSQL store: pass authority_url too")


def read_config(folder: Path) -> dict[str, Any] | None:
    """The configuration of the store in ``folder``; None where there is none."""
    config_file = folder / CONFIG_FILE
    return json.loads(config_file.read_text()) if config_file.is_file() else None


def write_config(folder: Path, config: Mapping[str, Any]) -> None:
    (folder / CONFIG_FILE).write_text(json.dumps(config, indent=2, ensure_ascii=False))


def new_config(
    policy: Policy,
    embedder: Embedder,
    *,
    vector_store: str | None,
    bm25_backend: str,
    hnsw: dict[str, Any] | None,
    chroma_url: str | None,
) -> dict[str, Any]:
    """The configuration of a new store (a new Chroma collection's name, where its vectors are in Chroma)."""
    config: dict[str, Any] = {
        "format_version": FORMAT_VERSION,
        "policy": json.loads(policy.model_dump_json()),
        "embedding_model": embedder.model_name,
        **embedder.build,
        "probes": probes(embedder),
        "vector_store": vector_store or "chroma",
        "bm25_backend": bm25_backend,
    }
    if vector_store == "pgvector":
        config["vector_dimension"] = embedder.dimension
        config["hnsw"] = {**DEFAULT_PGVECTOR_HNSW, **(hnsw or {})}
    else:
        config["collection"] = f"car-{uuid.uuid4().hex[:16]}"
        config["chroma_url"] = chroma_url
        config["hnsw"] = {**DEFAULT_HNSW, **(hnsw or {})}
    return config


def checked(
    config: dict[str, Any], where: str, wanted: Policy | None, *, vector_store: str | None, chroma_url: str | None
) -> tuple[dict[str, Any], tuple[Rule, ...]]:
    """The stored ``config`` as this process opens the store at ``where`` with the policy ``wanted``
    (when given), and the rules ``wanted`` adds to the built policy (see :func:`added_rules`);
    a format, policy, vector store or Chroma server that cannot be opened as asked is refused."""
    if config.get("format_version") != FORMAT_VERSION:
        raise StoreError(f"{where}: unsupported store format {config.get('format_version')!r}")
    added: tuple[Rule, ...] = ()
    if wanted is not None and (built := Policy.model_validate(config["policy"])) != wanted:
        differ = _resolution_differences(built, wanted)
        added = added_rules(built, wanted) if differ else ()
        if differ and not added:
            raise StoreError(
                f"store {where} was built with policy {built.name!r}; the policy given ({wanted.name!r}) "
                f"resolves differently (its {', '.join(differ)} differ): ingest into a new store"
            )
        if not added:
            # Only the words (states, descriptions, verbs) or the record_scope extractors
            # differ: neither changes an edge between stored records, so this process answers
            # in the caller's words and fills the scope of what it ingests with the caller's
            # extractors; the stored policy is left as built.
            config = {**config, "policy": json.loads(wanted.model_dump_json())}
    if vector_store is not None and vector_store != vector_store_of(config):
        raise StoreError(
            f"store {where} uses {vectors_at(config)}, not {vector_store}: a store keeps the vector "
            "store it was made with (ingest into a new store to change it)"
        )
    if chroma_url is not None and chroma_url != config.get("chroma_url"):
        raise StoreError(f"store {where} uses {vectors_at(config)}, not Chroma at {chroma_url}")
    return config, added


def added_rules(built: Policy, wanted: Policy) -> tuple[Rule, ...]:
    """The rules (with exception revocations) ``wanted`` adds to ``built``, where it changes
    nothing else that decides edges beyond the hierarchies they read; empty otherwise."""
    names = {r.name for r in built.rules}
    narrowed = wanted.model_copy(
        update={"rules": tuple(r for r in wanted.rules if r.name in names), "hierarchies": built.hierarchies}
    )
    kept = all(wanted.hierarchies.get(name) == h for name, h in built.hierarchies.items())
    if not kept or _resolution_differences(built, narrowed):
        return ()
    return tuple(r for r in wanted.edge_rules if r.name not in {b.name for b in built.edge_rules})


def pairing_rules(added: tuple[Rule, ...], built: Policy, wanted: Policy, records: Collection[Record]) -> list[str]:
    """The ``added`` rules that would pair stored ``records``: records of the types a rule pairs are
    stored and, where it reads a hierarchy ``wanted`` adds, that hierarchy has a default or some
    record has its level. Such a rule would make edges among stored records: the store must be
    rebuilt to take it; the others make none, so the store takes them for what it ingests next."""
    new_levels = {name: h for name, h in wanted.hierarchies.items() if name not in built.hierarchies}

    def pairs_stored(rule: Rule) -> bool:
        typed = all(t == "*" or any(r.doc_type == t for r in records) for t in (rule.trigger, rule.target))
        level = new_levels.get(rule.hierarchy or "")
        return typed and (level is None or level.default is not None or any(level.field in r.metadata for r in records))

    return sorted(r.name for r in added if pairs_stored(r))


def _resolution_differences(built: Policy, wanted: Policy) -> list[str]:
    """The fields of two policies that decide edges and scopes and differ (empty: only words or
    ``record_scope`` differ; extractors decide the scope of records ingested next, not an edge
    between stored ones, whose scope is stored with them)."""
    words = {"description", "verb"}
    rules = [r.model_dump(exclude=words) for r in built.rules], [r.model_dump(exclude=words) for r in wanted.rules]
    fields = ("name", "scope_keys", "scope_patterns", "case_insensitive_keys", "hierarchies", "trust")
    return [f for f in fields if getattr(built, f) != getattr(wanted, f)] + (["rules"] if rules[0] != rules[1] else [])
