"""Permission fuzz: randomized corpora with restricted anchors and superseders, randomized callers.

Builds ``--corpora`` security-advisory corpora (disclosure ⊳ patch ⊳ later patch chains,
~150-250 records each) in which every record independently gets a random tenant (none,
``acme``, ``globex``) and a random ``allowed_principals`` subset (often empty), and whose
every text carries a unique secret marker ``SECRET-<hash of doc_id>``. Then runs ``--cases``
randomized retrievals (random caller × random query × random anchor mode × random k1 and
depth × random renderer options; a quarter of the BM25/hybrid cases with a ``rank-bm25``
index passed as ``lexical=``, a tenth with the timestamp baseline) and checks, for each:

(a) channels: the BM25 and dense candidates the retriever actually asked for (spied), the
    same channels called directly with ``caller.mask(...)`` / ``caller.chroma_where()``, and
    the fused Stage-1 anchors hold only records the caller may read; the masked BM25 list
    equals that of an index over the readable records alone (nothing restricted crowds a
    readable record out or moves its score through the corpus statistics);
(b) result: every ranked record, anchor id and supersession edge (voided_by, voids,
    superseded_by) is readable, and so is every id in ``result.to_dict()``; every readable
    record of a CVE the query names is admitted (lookups under ``scope_lookup_limit``);
(c) XML: ``render_audit(result, policy=store.policy)`` holds no unreadable doc_id, secret
    marker or text, and every packet with a hidden superseder carries
    ``<superseded-by hidden="true">`` and ``status="superseded"``;
(d) status: every result record with an ancestor is ``superseded`` (one with none is
    ``active``); one with an unreadable ancestor and no readable active superseder in the
    result has ``hidden_superseder``; ``hidden_superseder`` is never set without an
    unreadable ancestor; ``superseded_by`` is exactly the result's active ancestors; every
    readable ancestor of a result record is in the result (a hidden middle link does not
    cut the chain);
(e) sanity: the same retrieval without a caller, and the unmasked channels, are counted
    when they do return records the caller may not read, to prove the gate was exercised.

Run:  python evals/permissions_fuzz.py --cases 1000 [--corpora 5] [--seed S] [--out evals/results/permissions_fuzz.txt]
"""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")

import argparse  # noqa: E402
import hashlib  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import random  # noqa: E402
import re  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import xml.etree.ElementTree as ET  # noqa: E402
from collections import Counter  # noqa: E402
from collections.abc import Callable  # noqa: E402
from dataclasses import dataclass, field  # noqa: E402
from datetime import UTC, datetime, timedelta  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402

import car_rag  # noqa: E402
from car_rag import CallerContext, CARStore, ControllingAuthorityRetriever, Embedder  # noqa: E402
from car_rag.channels import LexicalIndex, make_lexical_index  # noqa: E402
from car_rag.evidence import render_audit  # noqa: E402
from car_rag.namespacing import renamed  # noqa: E402
from car_rag.records import shown_id  # noqa: E402

__all__ = [
    "CALLER_TENANTS",
    "CORPUS_TENANTS",
    "PRINCIPALS",
    "Case",
    "Corpus",
    "FuzzReport",
    "Violation",
    "build_corpus_records",
    "check_case",
    "format_report",
    "marker_for",
    "open_corpus",
    "random_caller",
    "random_case",
    "run_fuzz",
    "unreadable_leaks",
]

CORPUS_TENANTS: list[str | None] = [None, None, "acme", "globex"]
"""Tenants drawn for records (None twice: half the records belong to every tenant)."""
CALLER_TENANTS: list[str | None] = [None, "acme", "globex", "initech"]
"""Tenants drawn for callers: ``initech`` owns nothing, None is a caller with no tenant."""
PRINCIPALS = ["sec", "legal", "intern", "admin"]
MODES = ("bm25", "dense", "hybrid")
POLICY = "security-advisory"

ID_RE = re.compile(r"adv-\d+-\d{3}-(?:disclosure|patch\d)")
MARKER_RE = re.compile(r"SECRET-[0-9a-f]{12}")

PACKAGES = [
    "lodash", "axios", "express", "minimist", "node-tar", "log4j-core", "jackson-databind", "spring-web",
    "netty-codec", "struts2-core", "django", "flask", "requests", "urllib3", "pillow", "pyyaml", "rails",
    "nokogiri", "openssl", "libxml2", "curl", "zlib", "golang.org/x/net", "serde_json",
]  # fmt: skip
VULNS = [
    ("prototype pollution", "merge function", "modify object prototypes and escalate to code execution"),
    ("remote code execution", "message lookup", "run arbitrary code on the server"),
    ("SQL injection", "query builder", "read or modify arbitrary database rows"),
    ("cross-site scripting", "template engine", "inject script into rendered pages"),
    ("path traversal", "archive extractor", "write files outside the extraction directory"),
    ("denial of service", "regular expression parser", "exhaust CPU with catastrophic backtracking"),
    ("server-side request forgery", "HTTP client", "reach internal services from the server"),
    ("heap buffer overflow", "image decoder", "corrupt memory and crash the process"),
    ("unsafe deserialization", "object mapper", "instantiate gadget classes from untrusted input"),
    ("XML external entity injection", "document parser", "read local files through entity expansion"),
    ("authentication bypass", "session middleware", "impersonate other users without credentials"),
    ("use-after-free", "TLS handshake", "trigger memory corruption during renegotiation"),
    ("open redirect", "URL normalizer", "redirect victims to attacker controlled sites"),
    ("command injection", "shell helper", "execute operating system commands"),
    ("integer overflow", "compression stream", "write past the end of an allocated buffer"),
    ("request smuggling", "header parser", "desynchronize proxies and poison caches"),
]  # fmt: skip
VECTORS = [
    "a crafted payload", "a malicious archive", "a specially crafted header", "an oversized input",
    "a nested JSON document", "a forged cookie", "an untrusted configuration file", "a malformed certificate",
]  # fmt: skip
SEVERITIES = [("low", 3.1), ("medium", 5.4), ("high", 7.5), ("high", 8.1), ("critical", 9.8)]
MITIGATIONS = [
    "validates input before use", "rejects the malicious construct", "bounds every allocation",
    "disables the dangerous lookup by default", "escapes untrusted values", "normalizes paths before writing",
    "limits recursion depth", "checks lengths before copying",
]  # fmt: skip
BASE_DAY = datetime(2019, 1, 1, tzinfo=UTC)


def marker_for(doc_id: str) -> str:
    """The secret marker carried by ``doc_id``'s text (and by no other record's)."""
    return "SECRET-" + hashlib.sha256(doc_id.encode()).hexdigest()[:12]


# ---------------------------------------------------------------------- corpora
def _governance(rng: random.Random, public_share: float) -> dict[str, Any]:
    """Random tenant and principals for one record (each drawn independently)."""
    out: dict[str, Any] = {}
    if rng.random() < public_share:
        return out
    tenant = rng.choice(CORPUS_TENANTS)
    if tenant is not None:
        out["tenant"] = tenant
    if rng.random() < 0.5:
        out["allowed_principals"] = sorted(rng.sample(PRINCIPALS, rng.randint(1, 3)))
    return out


def build_corpus_records(rng: random.Random, index: int, *, size: tuple[int, int] = (150, 250)) -> list[dict]:
    """One randomized corpus: chains disclosure ⊳ patch (⊳ later patch), random governance.

    Doc ids are ``adv-<corpus>-<chain>-disclosure|patch1|patch2`` (none is a substring of
    another); every text ends with the record's :func:`marker_for` token. A few chains reuse
    an earlier chain's CVE for another package (one CVE, several packages), and some
    disclosures have no patch (active disclosures).
    """
    target = rng.randint(*size)
    public_share = rng.uniform(0.15, 0.4)
    records: list[dict] = []
    used_cves: list[str] = []
    chain = 0
    while len(records) < target:
        chain += 1
        package = rng.choice(PACKAGES)
        if used_cves and rng.random() < 0.08:
            cve = rng.choice(used_cves)
        else:
            cve = f"CVE-{rng.randint(2019, 2025)}-{rng.randint(1000, 99999)}"
            while cve in used_cves:
                cve = f"CVE-{rng.randint(2019, 2025)}-{rng.randint(1000, 99999)}"
            used_cves.append(cve)
        vuln, component, impact = rng.choice(VULNS)
        vector = rng.choice(VECTORS)
        severity, cvss = rng.choice(SEVERITIES)
        major, minor, patch = rng.randint(0, 9), rng.randint(0, 30), rng.randint(0, 20)
        fixed = [f"{major}.{minor}.{patch + 1}", f"{major}.{minor}.{patch + 2 + rng.randint(0, 3)}"]
        size_roll = rng.random()
        n_patches = 0 if size_roll < 0.15 else 1 if size_roll < 0.6 else 2
        when = BASE_DAY + timedelta(days=rng.randint(0, 6 * 365))
        scope = {"package": package, "cve_id": cve}
        prefix = f"adv-{index}-{chain:03d}"

        doc_id = f"{prefix}-disclosure"
        text = rng.choice(
            [
                f"Security advisory {cve}: {vuln} in the {component} of {package} before {fixed[0]} lets "
                f"remote attackers {impact} via {vector}. Severity {severity}, CVSS {cvss}.",
                f"Vulnerability disclosure for {package}: the {component} is affected by {vuln} ({cve}). "
                f"An attacker can {impact} by sending {vector}. Rated {severity} ({cvss}).",
                f"{package} {major}.{minor}.{patch} and earlier contain a {severity} severity {vuln} flaw "
                f"tracked as {cve}; {vector} sent to the {component} can {impact}.",
            ]
        )
        records.append(
            {
                "doc_id": doc_id,
                "doc_type": "vulnerability_disclosure",
                "text": f"{text} Tracking token {marker_for(doc_id)}.",
                "scope": scope,
                "published_at": when.isoformat(),
                "source": rng.choice(["nvd", "ghsa", "vendor"]),
                **_governance(rng, public_share),
            }
        )
        for n in range(n_patches):
            when += timedelta(days=rng.randint(1, 120))
            doc_id = f"{prefix}-patch{n + 1}"
            mitigation = rng.choice(MITIGATIONS)
            if n == 0:
                text = rng.choice(
                    [
                        f"Release {package} {fixed[n]} fixes {cve}: the {component} now {mitigation}, closing "
                        f"the {vuln} reachable through {vector}. Upgrade is recommended.",
                        f"Patch release {fixed[n]} of {package} addresses the {severity} {vuln} ({cve}) in the "
                        f"{component}; it {mitigation}.",
                    ]
                )
            else:
                text = (
                    f"Release {package} {fixed[n]} completes the fix for {cve}: the earlier patch left the "
                    f"{vuln} in the {component} reachable with {vector}; this release {mitigation}."
                )
            records.append(
                {
                    "doc_id": doc_id,
                    "doc_type": "patch_release",
                    "text": f"{text} Tracking token {marker_for(doc_id)}.",
                    "scope": scope,
                    "published_at": when.isoformat(),
                    "version": fixed[n],
                    "source": "vendor",
                    **_governance(rng, public_share),
                }
            )
    return records


@dataclass
class Corpus:
    """One randomized corpus, ingested into a temporary store."""

    index: int
    store: CARStore
    records: list[dict]
    alt_lexical: LexicalIndex | None = None
    """A ``rank-bm25`` index over the same records, handed to some retrievers as ``lexical=``
    (None when rank-bm25 is not installed)."""
    retrievers: dict[tuple, ControllingAuthorityRetriever] = field(default_factory=dict)
    spied: dict[str, list[str]] = field(default_factory=lambda: {"bm25": [], "dense": []})
    """Doc ids every channel call returned since the last reset (filled by the spies)."""

    def lexical(self, backend: str) -> LexicalIndex:
        return self.alt_lexical if backend == "rank-bm25" and self.alt_lexical is not None else self.store.lexical

    def retriever(
        self, mode: str, k1: int, depth: int, resolution: str = "rules", lexical: str = "bm25s"
    ) -> ControllingAuthorityRetriever:
        key = (mode, k1, depth, resolution, lexical)
        if key not in self.retrievers:  # reused: its per-caller mask cache is exercised too
            self.retrievers[key] = ControllingAuthorityRetriever(
                self.store,
                anchors=mode,  # type: ignore[arg-type]
                k1=k1,
                depth=depth,
                resolution=resolution,  # type: ignore[arg-type]
                lexical=self.alt_lexical if lexical == "rank-bm25" else None,
            )
        return self.retrievers[key]


def _spy(fn: Callable[..., list], sink: list[str]) -> Callable[..., list]:
    def wrapped(*args: Any, **kwargs: Any) -> list:
        hits = fn(*args, **kwargs)
        sink.extend(h.doc_id for h in hits)
        return hits

    return wrapped


def open_corpus(records: list[dict], path: Path, embedder: Embedder, index: int = 0) -> Corpus:
    """Ingest ``records`` into a new store at ``path`` and spy on both channels' ``search``."""
    store = CARStore.open(path, POLICY, embedder=embedder)
    report = store.ingest(records, progress=False)
    if report.errors or len(report.added) != len(records):
        raise RuntimeError(f"corpus {index}: ingest rejected records: {[str(e) for e in report.errors]}")
    corpus = Corpus(index, store, records)
    try:
        alt = make_lexical_index("rank-bm25")
    except ImportError:
        alt = None
    if alt is not None:
        alt.build(store.lexical.doc_ids, [store.records[d].text for d in store.lexical.doc_ids])
        corpus.alt_lexical = alt
        alt.search = _spy(alt.search, corpus.spied["bm25"])  # type: ignore[method-assign]
    # Instance attributes shadow the methods: every Stage-1 channel call is recorded.
    store.lexical.search = _spy(store.lexical.search, corpus.spied["bm25"])  # type: ignore[method-assign]
    store.dense.search = _spy(store.dense.search, corpus.spied["dense"])  # type: ignore[method-assign]
    return corpus


# ---------------------------------------------------------------------- cases
@dataclass
class Case:
    corpus: int
    number: int
    caller: CallerContext
    query: str
    query_kind: str
    target: str
    mode: str
    k1: int
    depth: int
    render: dict[str, Any]
    resolution: str = "rules"
    lexical: str = "bm25s"

    def describe(self) -> str:
        principals = sorted(self.caller.principals)
        return (
            f"corpus {self.corpus} case {self.number}: caller(tenant={self.caller.tenant!r}, principals={principals}) "
            f"mode={self.mode} k1={self.k1} depth={self.depth} resolution={self.resolution} lexical={self.lexical} "
            f"render={self.render} "
            f"query[{self.query_kind}, target {self.target}]={self.query!r}"
        )


@dataclass
class Violation:
    kind: str
    detail: str
    case: str

    def __str__(self) -> str:
        return f"[{self.kind}] {self.detail}\n    {self.case}"


def random_caller(rng: random.Random) -> CallerContext:
    tenant = rng.choice(CALLER_TENANTS)
    principals = {p for p in PRINCIPALS if rng.random() < 0.35}
    if rng.random() < 0.1:
        principals.add("contractor")  # a principal no record names
    return CallerContext(tenant, principals)


def _query_words(text: str) -> list[str]:
    words = [w.strip(".,;:()") for w in text.split()]
    return [w for w in words if w and not w.startswith(("SECRET-", "CVE-"))]


def random_case(rng: random.Random, corpus: Corpus, number: int) -> Case:
    """Random caller × query × anchor mode × k1/depth × renderer options.

    The query's target record is, half the time, one the caller may not read (a probe). Query
    kinds: ``words`` (3-8 words of its text), ``cve`` (words plus its CVE id: the query-named
    scope path), ``marker`` (its secret marker plus words: BM25 would rank it first if the
    mask let it) and ``cve_only``.
    """
    caller = random_caller(rng)
    records = corpus.records
    hidden = [r for r in records if not caller.can_read(corpus.store.get(r["doc_id"], r.get("tenant")))]
    target = rng.choice(hidden) if hidden and rng.random() < 0.5 else rng.choice(records)
    words = _query_words(target["text"])
    picked = rng.sample(words, min(len(words), rng.randint(3, 8)))
    kind = rng.choices(["words", "cve", "marker", "cve_only"], weights=[4, 3, 2, 1])[0]
    if kind == "cve":
        picked.insert(rng.randint(0, len(picked)), target["scope"]["cve_id"])
    elif kind == "marker":
        picked = [marker_for(target["doc_id"])] + picked[:3]
    elif kind == "cve_only":
        picked = [rng.choice(["status of", "is there a fix for", "advisory"]), target["scope"]["cve_id"]]
    k1 = rng.randint(1, 15)
    depth = rng.randint(k1, 60)
    render = {
        "k": rng.choice([None, None, rng.randint(1, 12)]),
        "superseded": rng.choice(["include", "include", "omit"]),
        "rationale": rng.random() < 0.8,
    }
    mode = rng.choice(MODES)
    resolution = "timestamp" if rng.random() < 0.1 else "rules"
    lexical = "rank-bm25" if corpus.alt_lexical is not None and mode != "dense" and rng.random() < 0.25 else "bm25s"
    return Case(
        corpus.index, number, caller, " ".join(picked), kind, target["doc_id"], mode, k1, depth, render, resolution, lexical
    )


# ---------------------------------------------------------------------- checks
def unreadable_leaks(text: str, unreadable: set[str], texts: dict[str, str]) -> list[str]:
    """Unreadable doc ids, markers or full texts that occur in ``text``."""
    found = [f"doc_id {d}" for d in set(ID_RE.findall(text)) if d in unreadable]
    markers = {marker_for(d): d for d in unreadable}
    found += [f"marker of {markers[m]}" for m in set(MARKER_RE.findall(text)) if m in markers]
    found += [f"text of {d}" for d in unreadable if texts[d] in text]
    return sorted(found)


def check_case(corpus: Corpus, case: Case, stats: Counter) -> list[Violation]:
    """Run one case and return every violated property; ``stats`` counts what was exercised."""
    store, caller, q = corpus.store, case.caller, case.query
    graph = store.graph
    unreadable = {d for d, r in store.records.items() if not caller.can_read(r)}
    texts = {d: r.text for d, r in store.records.items()}
    # Results name records by their writers' doc_ids (unique in these corpora), the store by its keys
    # (car_rag.namespacing): what is shown is checked against the doc_ids, the rest against the keys.
    held_as = {shown_id(d): d for d in store.records}
    shown_unreadable = {shown_id(d) for d in unreadable}
    shown_texts = {shown_id(d): t for d, t in texts.items()}
    out: list[Violation] = []
    desc = case.describe()

    def bad(kind: str, detail: str) -> None:
        out.append(Violation(kind, detail, desc))

    # (a) what the retriever's channels actually returned, spied during retrieve(caller)
    retriever = corpus.retriever(case.mode, case.k1, case.depth, case.resolution, case.lexical)
    lexical = corpus.lexical(case.lexical)
    for sink in corpus.spied.values():
        sink.clear()
    shown = retriever.retrieve(q, caller=caller)
    result = renamed(shown, lambda d: held_as.get(d, d))
    for channel, ids in corpus.spied.items():
        leaked = sorted(set(ids) & unreadable)
        if leaked:
            bad("channel", f"{channel} candidates during retrieve held unreadable {leaked}")
    leaked = sorted({h.doc_id for h in result.anchors} & unreadable)
    if leaked:
        bad("stage1", f"Stage-1 anchors held unreadable {leaked}")

    # (a) the channels called directly with the compiled gate, and unmasked for comparison
    mask = caller.mask(lexical.doc_ids, store.records)
    masked_hits = lexical.search(q, case.depth, mask=mask)
    full_hits = lexical.search(q, len(lexical.doc_ids))
    masked, full = [h.doc_id for h in masked_hits], [h.doc_id for h in full_hits]
    vector = store.embedder.encode([q])[0]
    dense = [h.doc_id for h in store.dense.search(vector, case.depth, where=caller.chroma_where())]
    dense_open = [h.doc_id for h in store.dense.search(vector, case.depth)]
    for channel, ids in (("bm25", masked), ("dense", dense)):
        leaked = sorted(set(ids) & unreadable)
        if leaked:
            bad("channel", f"{channel} search with the caller's gate returned unreadable {leaked}")
    # Gated before scoring, statistics included: the masked top-depth is what an index of the same
    # backend over the readable records alone returns (issue 32: record count, length and document
    # frequencies over what the caller may read). Compared by score (float32 backends: within
    # rounding), and by id above the last score: which of several records tied at the cut-off make
    # the top k is up to np.argpartition.
    readable_ids = [d for d in lexical.doc_ids if d not in unreadable]
    alone = type(lexical)()
    alone.build(readable_ids, [store.records[d].text for d in readable_ids])
    expected = alone.search(q, case.depth) if readable_ids else []
    cut = expected[-1].score if expected else 0.0
    above = lambda hits: {h.doc_id: h.score for h in hits if h.score > cut + 1e-5}  # noqa: E731
    same_scores = len(masked_hits) == len(expected) and np.allclose(
        [h.score for h in masked_hits], [h.score for h in expected], rtol=1e-5, atol=1e-6
    )
    mine, theirs = above(masked_hits), above(expected)
    same_above = mine.keys() == theirs.keys() and all(np.isclose(mine[d], theirs[d], rtol=1e-5, atol=1e-6) for d in mine)
    if not (same_scores and same_above):
        bad(
            "bm25-crowding",
            f"masked BM25 {masked[:10]}… != an index of the readable records alone {[h.doc_id for h in expected][:10]}…",
        )
    readable_count = len(store.records) - len(unreadable)
    stats["dense_short"] += len(dense) < min(case.depth, readable_count)
    stats["bm25_unmasked_had_unreadable"] += bool(set(full[: case.depth]) & unreadable)
    stats["dense_unfiltered_had_unreadable"] += bool(set(dense_open) & unreadable)
    if case.query_kind == "marker" and case.target in unreadable:
        stats["marker_probes_of_unreadable"] += 1
        stats["marker_probe_unmasked_top1"] += bool(full) and full[0] == case.target

    # (b) every record and edge of the result, and its JSON form
    ids = result.doc_ids()
    in_result = set(ids)
    mentioned: set[str] = set()
    for item in result.ranked:
        mentioned |= {item.doc_id, *item.superseded_by}
        mentioned |= {e.superseder for e in item.voided_by} | {e.target for e in item.voided_by}
        mentioned |= {e.superseder for e in item.voids} | {e.target for e in item.voids}
        if item.anchor_id is not None:
            mentioned.add(item.anchor_id)
    leaked = sorted(mentioned & unreadable)
    if leaked:
        bad("result", f"result records or edges name unreadable {leaked}")
    as_dict = shown.to_dict()
    del as_dict["query"]  # the caller's own words (a marker probe names the marker it probes for)
    leaks = unreadable_leaks(json.dumps(as_dict, ensure_ascii=False), shown_unreadable, shown_texts)
    if leaks:
        bad("result-json", f"result.to_dict() leaks {leaks}")

    # (b) Stage-2 admission is not over-filtered: every readable record of a scope id the query
    # names is admitted (when the lookup is under the retriever's scope_lookup_limit)
    for key, values in store.policy.scope_ids_in(q).items():
        for value in values:
            named = [r.doc_id for r in graph.lookup({key: value})]
            if len(named) <= retriever.scope_lookup_limit and len(store.policy.scope_ids_in(q)) == 1:
                missing = sorted(d for d in named if d not in unreadable and d not in in_result)
                stats["scope_named_readable_records"] += sum(d not in unreadable for d in named)
                stats["scope_named_unreadable_records"] += sum(d in unreadable for d in named)
                if missing:
                    bad("scope", f"readable records {missing} of query-named {key}={value} not admitted")

    # (c) the rendered XML
    xml = render_audit(shown, policy=store.policy, **case.render)
    leaks = unreadable_leaks(xml, shown_unreadable, shown_texts)
    if leaks:
        bad("xml", f"XML leaks {leaks}")
    by_id = {item.doc_id: item for item in shown.ranked}
    for el in ET.fromstring(xml).iter("evidence-packet"):
        packet_item = by_id.get(el.get("doc-id", ""))
        if packet_item is None:
            bad("xml", f"XML packet {el.get('doc-id')!r} is not in the result")
            continue
        if el.get("status") != packet_item.status:
            bad("xml-status", f"{packet_item.doc_id}: XML status {el.get('status')} != result status {packet_item.status}")
        hidden_el = [c for c in el.findall("superseded-by") if c.get("hidden") == "true"]
        if packet_item.hidden_superseder and not hidden_el:
            bad("xml-status", f"{packet_item.doc_id}: hidden superseder not marked in the XML")
        if hidden_el and any(set(c.attrib) != {"hidden"} for c in hidden_el):
            bad("xml", f"{packet_item.doc_id}: hidden superseded-by element carries attributes {[c.attrib for c in hidden_el]}")

    # (d) statuses: stale authority is never reported active, hidden superseders are flagged.
    # (Under the timestamp baseline statuses follow scope buckets, not the authority graph: only
    # "an unreadable superseder makes it superseded" is checked there.)
    rules = case.resolution == "rules"
    active = {item.doc_id for item in result.ranked if item.status == "active"}
    hidden_items = 0
    for item in result.ranked:
        ancestors = graph.ancestors(item.doc_id)
        secret = ancestors & unreadable
        controlling = sorted(ancestors & active)
        if secret and item.status != "superseded":
            bad("status", f"{item.doc_id} is voided by unreadable {sorted(secret)} but is {item.status}")
        if secret:
            stats["records_with_unreadable_ancestor"] += 1
            stats["records_with_unreadable_ancestor_but_readable_controller"] += bool(controlling)
            stats["stage1_anchors_with_unreadable_superseder"] += item.stage1 is not None
        hidden_items += item.hidden_superseder
        if not rules:
            continue
        if ancestors and item.status != "superseded":
            bad("status", f"{item.doc_id} has superseders {sorted(ancestors)} but is {item.status}")
        if not ancestors and item.status != "active":
            bad("status", f"{item.doc_id} has no superseder but is {item.status}")
        if secret and not controlling and not item.hidden_superseder:
            bad("hidden", f"{item.doc_id}: voided only by unreadable {sorted(secret)} but hidden_superseder is False")
        if item.hidden_superseder and not secret:
            bad("hidden", f"{item.doc_id}: hidden_superseder set but every superseder is readable")
        if item.hidden_superseder and item.superseded_by:
            bad("hidden", f"{item.doc_id}: hidden_superseder set alongside superseded_by {item.superseded_by}")
        if sorted(item.superseded_by) != controlling:
            bad("superseded_by", f"{item.doc_id}: superseded_by {item.superseded_by} != active ancestors in result {controlling}")
        missing = sorted((ancestors - unreadable) - in_result)
        if missing:
            bad("closure", f"{item.doc_id}: readable superseders {missing} missing from the result")
    stats["hidden_superseder_records"] += hidden_items
    stats["cases_with_hidden_superseder"] += hidden_items > 0

    # (e) sanity: would an unrestricted retrieval have shown the caller something it may not read?
    open_result = retriever.retrieve(q)
    open_hidden = {held_as.get(d, d) for d in open_result.doc_ids()} & unreadable
    stats["cases_with_hidden_records"] += bool(open_hidden)
    stats["hidden_records_total"] += len(open_hidden)
    stats["result_records"] += len(ids)
    stats["xml_chars"] += len(xml)
    stats[f"mode_{case.mode}"] += 1
    stats[f"resolution_{case.resolution}"] += 1
    stats[f"lexical_{case.lexical}"] += 1
    stats[f"query_{case.query_kind}"] += 1
    stats["cases_with_violations"] += bool(out)
    return out


# ---------------------------------------------------------------------- driver
@dataclass
class FuzzReport:
    cases: int
    corpora: int
    seed: int
    records: list[int]
    restricted: list[int]
    stats: Counter
    violations: list[Violation]
    seconds: float
    build_seconds: float

    @property
    def ok(self) -> bool:
        return not self.violations


def run_fuzz(
    cases: int = 1000,
    corpora: int = 5,
    seed: int = 0,
    *,
    embedder: Embedder | None = None,
    workdir: str | Path | None = None,
    corpus_size: tuple[int, int] = (150, 250),
    progress: Callable[[str], None] | None = None,
) -> FuzzReport:
    """Build ``corpora`` random corpora and run ``cases`` random cases spread over them."""
    if cases < 1 or corpora < 1:
        raise ValueError("need cases >= 1 and corpora >= 1")
    started = time.perf_counter()
    embedder = embedder or Embedder()
    _ = embedder.model  # load once; shared by every corpus
    rng = random.Random(seed)
    stats: Counter = Counter()
    violations: list[Violation] = []
    sizes: list[int] = []
    restricted: list[int] = []
    build_seconds = 0.0
    per_corpus = [cases // corpora + (i < cases % corpora) for i in range(corpora)]
    with tempfile.TemporaryDirectory(prefix="car-perm-fuzz-", dir=workdir) as tmp:
        number = 0
        for index in range(corpora):
            built = time.perf_counter()
            records = build_corpus_records(rng, index, size=corpus_size)
            corpus = open_corpus(records, Path(tmp) / f"corpus-{index}", embedder, index)
            build_seconds += time.perf_counter() - built
            sizes.append(len(records))
            restricted.append(sum(1 for r in records if r.get("tenant") or r.get("allowed_principals")))
            try:
                for _ in range(per_corpus[index]):
                    number += 1
                    case = random_case(rng, corpus, number)
                    violations.extend(check_case(corpus, case, stats))
                    if progress and number % 100 == 0:
                        progress(f"{number}/{cases} cases, {len(violations)} violations")
            finally:
                corpus.store.close()
    stats["cases"] = cases
    return FuzzReport(cases, corpora, seed, sizes, restricted, stats, violations, time.perf_counter() - started, build_seconds)


def format_report(report: FuzzReport, *, max_violations: int = 20) -> str:
    s, n = report.stats, max(report.cases, 1)

    def pct(key: str) -> str:
        return f"{s[key]} ({100 * s[key] / n:.0f}%)"

    lines = [
        "permissions_fuzz: eligibility gate of car_rag (channels, Stage-2 admission, result, XML)",
        f"car-rag {car_rag.__version__}, Python {platform.python_version()}; policy {POLICY}; seed {report.seed}",
        f"corpora: {report.corpora}; records: {sum(report.records)} ({', '.join(map(str, report.records))}); "
        f"restricted (tenant or principals): {sum(report.restricted)} "
        f"({100 * sum(report.restricted) / max(sum(report.records), 1):.0f}%)",
        f"cases run: {report.cases} (bm25 {s['mode_bm25']}, dense {s['mode_dense']}, hybrid {s['mode_hybrid']}; "
        f"queries: words {s['query_words']}, cve-named {s['query_cve']}, marker probes {s['query_marker']}, "
        f"cve-only {s['query_cve_only']}; timestamp-baseline resolution {s['resolution_timestamp']}; "
        f"rank-bm25 anchors {s['lexical_rank-bm25']}); {s['result_records']} result records, {s['xml_chars']:,} XML characters",
        f"runtime: {report.seconds:.1f} s ({report.build_seconds:.1f} s building and embedding corpora)",
        "gate exercised:",
        f"  cases whose unrestricted retrieval returned records the caller may not read (hidden records): "
        f"{pct('cases_with_hidden_records')}; {s['hidden_records_total']} such records in all",
        f"  cases whose unmasked BM25 top-depth held unreadable records: {pct('bm25_unmasked_had_unreadable')}",
        f"  cases whose unfiltered dense top-depth held unreadable records: {pct('dense_unfiltered_had_unreadable')}",
        f"  marker probes for an unreadable record: {s['marker_probes_of_unreadable']} "
        f"(unmasked BM25 ranked the target first in {s['marker_probe_unmasked_top1']})",
        f"  cases with a hidden superseder in the result: {pct('cases_with_hidden_superseder')}; "
        f"{s['hidden_superseder_records']} records flagged hidden_superseder",
        f"  result records with an unreadable superseder: {s['records_with_unreadable_ancestor']} "
        f"({s['records_with_unreadable_ancestor_but_readable_controller']} of them also voided by a visible active record); "
        f"Stage-1 anchors among them: {s['stage1_anchors_with_unreadable_superseder']}",
        f"  query-named scope lookups: {s['scope_named_readable_records']} readable records admitted, "
        f"{s['scope_named_unreadable_records']} unreadable ones kept out",
        f"  filtered dense searches returning fewer than min(depth, readable) hits: {s['dense_short']} (not a leak)",
        f"violations: {len(report.violations)} in {s['cases_with_violations']} cases",
    ]
    kinds = Counter(v.kind for v in report.violations)
    for kind, count in sorted(kinds.items()):
        lines.append(f"  {kind}: {count}")
    for v in report.violations[:max_violations]:
        lines.append(f"  {v}")
    lines.append(
        "result: PASS - no unreadable id, marker or text in any channel's candidates, the result or the XML; "
        "every record with a hidden superseder reported superseded"
        if report.ok
        else "result: FAIL"
    )
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", type=int, default=1000, help="randomized cases in all (default 1000)")
    parser.add_argument("--corpora", type=int, default=5, help="randomized corpora the cases are spread over (default 5)")
    parser.add_argument("--seed", type=int, default=None, help="seed (default: random, printed)")
    parser.add_argument("--out", type=Path, help="also write the report to this file")
    args = parser.parse_args()
    if args.cases < 1 or args.corpora < 1:
        parser.error("--cases and --corpora must be >= 1")
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**32)
    report = run_fuzz(args.cases, args.corpora, seed, progress=lambda m: print(m, file=sys.stderr, flush=True))
    text = format_report(report)
    print(text, end="")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text, encoding="utf-8")
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
