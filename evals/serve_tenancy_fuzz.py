"""Tenancy fuzz of `car-rag serve` (issue 19): randomized requests with wrong, missing and other
tenants' keys against a real server over a real store; no response, log line or metric label may
show a tenant's record to a caller who may not read it.

The store holds three tenants' secret records, each carrying a unique marker (``mk`` + 10 hex
digits) in its doc_id, text, source and uri: private disclosure/patch chains, embargoed public
patches (``legal`` readers only) that void public disclosures, tenant patches claiming the next
tenant's private records (claims that void nothing: :mod:`car_rag.trust`), and patches readable
only by the tenant's ``legal`` principal that void tenant-wide disclosures (hidden superseders);
plus public records. Keys: per tenant an analyst, a legal reader and a writer; a public reader; an owner
(writer without a tenant). Each request picks a key, or a wrong one (missing, unknown, case
changed, truncated, its SHA-256, another scheme or header), and one of:

* ``POST /retrieve``: every format, ``with_text``, ``with_records``, k 1-20, a token budget, questions made of a
  record's words and scope (never its marker), to a BM25-anchored server or (a sixth) a hybrid
  one; or a body setting ``caller``, an unknown field, a bad k or format, malformed JSON;
* ``POST /records``: fresh records of the key's tenant that void other tenants' records (by rule or
  by an explicit ``supersedes``), records of another tenant, a doc_id another tenant (or the
  public, or a principal the key lacks) holds (only the last refused: doc_ids are namespaced per
  tenant, so the others are records of the key's tenant of their own), the key's own records replaced, a ``caller`` field,
  a bad field in a batch, no records, malformed JSON;
* ``GET /metrics``, ``/readyz``, ``/healthz``.

Checked per request (one at a time, so that each log line belongs to the request in flight): the
status is one the request's key and body allow; the response (body and headers) and the log
lines written while it ran (the root logger at INFO, what ``car-rag serve -v`` writes, or at
``--log-level``; uvicorn's error and access logs at INFO) hold no marker of a record the key may
not read (by this file's own reading rule, not car-rag's), unless the request itself sent it; no
API key appears anywhere. At the end: the /metrics text holds no marker, tenant, key name or key,
and its labels only paths, statuses, stages, channels and outcomes; the store holds exactly the
records the accepted writes put there.

    python evals/serve_tenancy_fuzz.py --requests 5000 --out evals/results/serve/tenancy-fuzz.md
"""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import argparse  # noqa: E402
import json  # noqa: E402
import logging  # noqa: E402
import random  # noqa: E402
import re  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from collections import Counter  # noqa: E402
from collections.abc import Iterator  # noqa: E402
from contextlib import ExitStack, contextmanager  # noqa: E402
from dataclasses import dataclass, field  # noqa: E402
from datetime import UTC, datetime, timedelta  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import httpx  # noqa: E402
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from car_rag import CARStore, Embedder, Record, load_policy  # noqa: E402
from car_rag.namespacing import shown_record  # noqa: E402
from car_rag.records import tenant_key as key_in_store  # noqa: E402
from car_rag.serve.keys import ApiKey, ApiKeys, hash_key  # noqa: E402
from car_rag.serve.service import Service  # noqa: E402
from car_rag_evals.results_header import ResultsHeader, results_header  # noqa: E402
from car_rag_evals.servers import serving  # noqa: E402

TENANTS = ("acme", "globex", "initech")
FORMATS = ("json", "audit", "reader", "plain")
METRIC_LABELS = {"path", "status", "stage", "channel", "outcome"}
MARKER = re.compile(r"mk[0-9a-f]{10}")
EPOCH = datetime(2024, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class Key:
    name: str
    secret: str
    tenant: str | None = None
    principals: tuple[str, ...] = ()
    write: bool = False


def may_read(key: Key | None, record: dict[str, Any]) -> bool:
    """This fuzz's own reading rule (the README's *Eligibility*), not car-rag's code."""
    if key is None:
        return False
    allowed = record.get("allowed_principals") or []
    return record.get("tenant") in (None, key.tenant) and (not allowed or bool(set(allowed) & set(key.principals)))


@dataclass
class World:
    """What the store should hold, and which record each marker was written with."""

    rng: random.Random
    records: dict[str, dict[str, Any]] = field(default_factory=dict)
    marked: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    """Marker -> the records that carry it (a doc_id's marker: each tenant's record of that doc_id)."""
    topics: list[dict[str, str]] = field(default_factory=list)
    words: set[str] = field(default_factory=set)
    day: int = 0

    def word(self) -> str:
        while True:
            made = "".join(self.rng.choice("bdfgklmnprstvz") + self.rng.choice("aeiou") for _ in range(3))
            if made not in self.words:
                self.words.add(made)
                return made

    def topic(self, tag: str) -> dict[str, str]:
        """A package, its CVE and two words of its own, for the records of one scope."""
        made = {
            "package": f"pkg-{tag}-{self.word()}",
            "cve_id": f"CVE-2099-{len(self.topics) + 40001}",
            "words": f"{self.word()} {self.word()}",
        }
        self.topics.append(made)
        return made

    def record(self, doc_type: str, topic: dict[str, str], **extra: Any) -> dict[str, Any]:
        """A new record of ``topic``, its marker in its doc_id, text, source and uri."""
        mark = f"mk{self.rng.getrandbits(40):010x}"
        self.day += 1
        what = "flaw" if doc_type == "vulnerability_disclosure" else "fix"
        return {
            "doc_id": f"{topic['package']}-{doc_type[:5]}-{mark}",
            "doc_type": doc_type,
            "text": f"{topic['cve_id']}: the {topic['words']} {what} in {topic['package']} (ref {mark}).",
            "scope": {"package": topic["package"], "cve_id": topic["cve_id"]},
            "source": f"feed {mark}",
            "uri": f"https://docs.example/{mark}",
            "published_at": (EPOCH + timedelta(hours=self.day)).isoformat(),
            **extra,
        }

    def store(self, record: dict[str, Any]) -> None:
        """``record`` is held (its tenant's doc_id now names it: doc_ids are namespaced per tenant)."""
        self.records[key_in_store(record.get("tenant"), record["doc_id"])] = record
        for mark in MARKER.findall(" ".join(record.get(f) or "" for f in ("doc_id", "text", "source", "uri"))):
            self.marked.setdefault(mark, []).append(record)


def seed(world: World) -> list[dict[str, Any]]:
    """Each tenant's secrets (and some public records), in ingest order."""
    made: list[dict[str, Any]] = []
    disclosure, patch = "vulnerability_disclosure", "patch_release"
    private = {t: [world.topic(f"{t}{i}") for i in range(2)] for t in TENANTS}
    for n, tenant in enumerate(TENANTS):
        upstream = TENANTS[(n + 1) % len(TENANTS)]
        for i in range(2):
            mine, shared, legal = private[tenant][i], world.topic(f"pub{tenant}{i}"), world.topic(f"{tenant}{i}legal")
            made += [
                world.record(disclosure, mine, tenant=tenant),
                world.record(patch, mine, tenant=tenant),
                world.record(disclosure, shared),
                # an embargoed public fix voids a public one (hidden from all but legal readers); a
                # tenant's patch claims the next tenant's, voiding nothing (car_rag.trust)
                world.record(patch, shared, allowed_principals=["legal"]),
                world.record(patch, private[upstream][i], tenant=tenant),
                world.record(disclosure, legal, tenant=tenant),
                world.record(patch, legal, tenant=tenant, allowed_principals=["legal"]),
            ]
    for i in range(3):
        topic = world.topic(f"open{i}")
        made += [world.record(disclosure, topic), world.record(patch, topic)]
    for record in made:
        world.store(record)
    return made


def make_keys(rng: random.Random) -> list[Key]:
    def secret() -> str:
        return "".join(rng.choice("abcdefghijkmnopqrstuvwxyzABCDEFGHJKLMNPQRSTUVWXYZ23456789") for _ in range(32))

    keys = [Key("public-reader", secret()), Key("owner", secret(), write=True)]
    for tenant in TENANTS:
        keys += [
            Key(f"{tenant}-analyst", secret(), tenant, ("analyst",)),
            Key(f"{tenant}-legal", secret(), tenant, ("legal",)),
            Key(f"{tenant}-writer", secret(), tenant, (), write=True),
        ]
    return keys


def wrong_key(rng: random.Random, keys: list[Key]) -> tuple[str, dict[str, str]]:
    """A kind of wrong key, and the headers that present it."""
    key = rng.choice(keys).secret
    kind = rng.choice(
        [
            "missing",
            "unknown",
            "case-changed",
            "truncated",
            "extended",
            "sha256",
            "basic",
            "empty-bearer",
            "token-scheme",
            "x-api-key",
        ]
    )
    headers = {
        "missing": {},
        "unknown": {"Authorization": f"Bearer {key[::-1]}"},
        "case-changed": {"Authorization": f"Bearer {key.swapcase()}"},
        "truncated": {"Authorization": f"Bearer {key[:-1]}"},
        "extended": {"Authorization": f"Bearer {key}x"},
        "sha256": {"Authorization": f"Bearer {hash_key(key)}"},
        "basic": {"Authorization": f"Basic {key}"},
        "empty-bearer": {"Authorization": "Bearer"},
        "token-scheme": {"Authorization": f"Token {key}"},
        "x-api-key": {"X-API-Key": key},
    }[kind]
    return kind, headers


@dataclass
class Request:
    kind: str
    method: str
    path: str
    key: Key | None  # the caller the server should take it for; None: no valid key
    headers: dict[str, str]
    expected: set[int]
    body: Any = None
    raw: bytes | None = None
    stores: list[dict[str, Any]] = field(default_factory=list)  # what a 200 says was stored
    hybrid: bool = False

    def sent(self) -> str:
        return self.raw.decode() if self.raw is not None else json.dumps(self.body)


def question(world: World) -> str:
    topic = world.rng.choice(world.topics)
    return world.rng.choice(
        [
            f"Is {topic['package']} still vulnerable to {topic['cve_id']}?",
            f"Is the {topic['words']} flaw in {topic['package']} fixed?",
            f"{topic['words']}",
            f"what fixes {topic['cve_id']}",
            f"{topic['words'].split()[0]} fix release notes",
        ]
    )


def retrieve_request(world: World, key: Key | None, headers: dict[str, str]) -> Request:
    rng = world.rng
    body: dict[str, Any] = {
        "query": question(world),
        "k": rng.randint(1, 20),
        "format": rng.choice(FORMATS),
        "with_text": rng.random() < 0.7,
        "with_records": rng.random() < 0.5,
    }
    if rng.random() < 0.15:
        body["token_budget"] = rng.choice([50, 200, 800])
    shape = rng.choices(["plain", "caller", "unknown-field", "bad-k", "bad-format", "malformed"], [70, 10, 5, 5, 5, 5])[0]
    expected = {200}
    raw = None
    if shape == "caller":
        body["caller"] = {"tenant": rng.choice(TENANTS), "principals": ["legal"]}
        expected = {400}
    elif shape in ("unknown-field", "bad-k", "bad-format"):
        wrong: dict[str, dict[str, Any]] = {
            "unknown-field": {"tenant": rng.choice(TENANTS)},
            "bad-k": {"k": rng.choice([0, 101, -1])},
            "bad-format": {"format": "html"},
        }
        body.update(wrong[shape])
        expected = {422}
    elif shape == "malformed":
        raw = json.dumps(body).encode()[: rng.randint(1, 20)]
        expected = {422} if key is not None else {401, 422}  # FastAPI parses JSON before it authenticates
    if key is None and shape != "malformed":
        expected = {401}
    return Request(f"retrieve:{shape}", "POST", "/retrieve", key, headers, expected, body, raw, hybrid=rng.random() < 1 / 6)


def records_request(world: World, key: Key | None, headers: dict[str, str]) -> Request:
    rng = world.rng
    held = list(world.records.values())
    tenant = key.tenant if key is not None and key.tenant is not None else rng.choice([*TENANTS, None])
    topic = rng.choice(world.topics)
    fresh_type = rng.choice(["vulnerability_disclosure", "patch_release"])
    shapes = [
        "fresh",
        "fresh-explicit",
        "other-tenant",
        "taken-doc-id",
        "replace-own",
        "caller-field",
        "bad-field-batch",
        "empty",
        "malformed",
    ]
    shape = rng.choices(shapes, [25, 10, 15, 15, 10, 5, 8, 4, 8])[0]
    tenant_key = key is not None and key.tenant is not None
    stores: list[dict[str, Any]] = []
    raw = None
    if shape == "fresh":
        body: Any = [world.record(fresh_type, topic, **_tenant(tenant)) for _ in range(rng.randint(1, 3))]
        stores, refused = body, False
    elif shape == "fresh-explicit":
        target = rng.choice([r for r in held if r["doc_type"] == "vulnerability_disclosure"])
        body = {**world.record("patch_release", topic, **_tenant(tenant)), "supersedes": [target["doc_id"]]}
        stores, refused = [body], False
    elif shape == "other-tenant":
        other = rng.choice([t for t in (*TENANTS, None) if t != tenant])
        body = [world.record(fresh_type, topic, **_tenant(tenant)), world.record(fresh_type, topic, **_tenant(other))]
        stores, refused = body, tenant_key
    elif shape == "taken-doc-id":
        victim = rng.choice(
            [r for r in held if not (key is not None and tenant_key and r.get("tenant") == key.tenant and may_read(key, r))]
        )
        body = {**world.record(fresh_type, topic, **_tenant(tenant)), "doc_id": victim["doc_id"]}
        # Refused only where the key's own tenant holds it: another tenant's (or the public's) doc_id is
        # a record of the key's tenant of its own (doc_ids are namespaced per tenant).
        stores, refused = [body], tenant_key and victim.get("tenant") == tenant
    elif shape == "replace-own":
        own = [r for r in held if r.get("tenant") == tenant]
        victim = rng.choice(own)
        renewed = world.record(
            victim["doc_type"],
            {
                "package": victim["scope"]["package"],
                "cve_id": victim["scope"]["cve_id"],
                "words": rng.choice(world.topics)["words"],
            },
        )
        body = {**victim, "text": renewed["text"], "source": renewed["source"]}
        stores, refused = [body], tenant_key and not may_read(key, victim)
    elif shape == "caller-field":
        body = {**world.record(fresh_type, topic, **_tenant(tenant)), "caller": {"tenant": rng.choice(TENANTS)}}
        refused = False
    elif shape == "bad-field-batch":
        body = [
            world.record(fresh_type, topic, **_tenant(tenant)),
            {**world.record(fresh_type, topic, **_tenant(tenant)), "published_at": 2024},
        ]
        refused = False
    elif shape == "empty":
        body, refused = [], False
    else:
        body, refused = None, False
        raw = json.dumps(world.record(fresh_type, topic, **_tenant(tenant))).encode()[: -rng.randint(1, 30)]
    if key is None:
        expected = {401}
    elif not key.write:
        expected = {403}
    elif shape in ("malformed", "empty", "caller-field", "bad-field-batch"):
        expected = {422}
    else:
        expected = {403} if refused else {200}
    return Request(f"records:{shape}", "POST", "/records", key, headers, expected, body, raw, stores)


def _tenant(tenant: str | None) -> dict[str, str]:
    return {} if tenant is None else {"tenant": tenant}


def next_request(world: World, keys: list[Key]) -> Request:
    rng = world.rng
    key: Key | None
    if rng.random() < 0.65:
        key = rng.choice(keys)
        scheme = rng.choice(["Bearer ", "Bearer ", "bearer ", "Bearer  "])  # the scheme is case-blind, the key trimmed
        headers, who = {"Authorization": f"{scheme}{key.secret}"}, key.name
    else:
        key = None
        who, headers = wrong_key(rng, keys)
    what = rng.choices(["retrieve", "records", "get"], [60, 30, 10])[0]
    if what == "retrieve":
        request = retrieve_request(world, key, headers)
    elif what == "records":
        request = records_request(world, key, headers)
    else:
        path = rng.choice(["/metrics", "/readyz", "/healthz"])
        request = Request(f"get:{path}", "GET", path, key, headers, {200 if key is not None or path != "/metrics" else 401})
    request.kind += f" as {who}"
    return request


class Capture(logging.Handler):
    """Every log line the process writes, with the number of the request in flight (the fuzz's
    own HTTP client's lines left out)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
        self.lines: list[tuple[int, str]] = []
        self.request = -1

    def emit(self, record: logging.LogRecord) -> None:
        if not record.name.startswith(("httpx", "httpcore")):
            self.lines.append((self.request, self.format(record)))


@contextmanager
def capturing(level: int) -> Iterator[Capture]:
    """What the root logger (at ``level``) and uvicorn's loggers write, captured (uvicorn's own log
    setup keeps its lines from the root logger)."""
    capture = Capture()
    loggers = [logging.getLogger(), logging.getLogger("uvicorn"), logging.getLogger("uvicorn.access")]
    root_level = loggers[0].level
    loggers[0].setLevel(level)
    for logger in loggers:
        logger.addHandler(capture)
    try:
        yield capture
    finally:
        for logger in loggers:
            logger.removeHandler(capture)
        loggers[0].setLevel(root_level)


@dataclass
class Report:
    requests: int = 0
    seconds: float = 0.0
    statuses: Counter[str] = field(default_factory=Counter)
    counts: Counter[str] = field(default_factory=Counter)
    violations: list[str] = field(default_factory=list)
    found_in: Counter[str] = field(default_factory=Counter)  # violations by where they were found

    def violation(self, where: str, text: str) -> None:
        self.violations.append(text)
        self.found_in[where] += 1


def leaks(text: str, key: Key | None, sent: str, world: World, keys: list[Key]) -> list[str]:
    """What ``text`` shows that ``key`` may not see: markers of records it may not read (unless the
    request sent them itself), and any API key."""
    found = [
        f"marker {m} of {_who(world.marked[m][0])}"
        for m in set(MARKER.findall(text))
        if m in world.marked and m not in sent and not any(may_read(key, r) for r in world.marked[m])
    ]
    found += [f"the key of {k.name!r}" for k in keys if k.secret in text]
    return found


def _who(record: dict[str, Any]) -> str:
    return f"{record['doc_id']!r} (tenant {record.get('tenant')}, principals {record.get('allowed_principals', [])})"


def check_metrics(text: str, keys: list[Key]) -> list[str]:
    problems = [f"/metrics holds marker {m}" for m in set(MARKER.findall(text))]
    problems += [
        f"/metrics holds {word!r}" for word in (*TENANTS, *(k.name for k in keys), *(k.secret for k in keys)) if word in text
    ]
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            extra = set(sample.labels) - METRIC_LABELS - {"le"}
            if extra:
                problems.append(f"/metrics {sample.name} has labels {sorted(extra)}")
            status = sample.labels.get("status")
            if status is not None and not status.isdigit():
                problems.append(f"/metrics {sample.name} has status {status!r}")
    return problems


def run_fuzz(
    requests: int,
    *,
    seed_value: int = 19,
    workdir: Path,
    embedder: Embedder | None = None,
    log_level: int = logging.INFO,
    leaky: bool = False,
) -> Report:
    """Seed a store in ``workdir``, serve it (BM25 and hybrid anchors), send ``requests`` randomized
    requests and check each (see the module docstring); the root logger captured at ``log_level``
    (INFO: what ``car-rag serve -v`` writes). ``leaky``: the servers answer every /retrieve without a
    caller (the checks must then find leaks)."""
    world = World(random.Random(seed_value))
    keys = make_keys(world.rng)
    api_keys = ApiKeys(
        {
            hash_key(k.secret): ApiKey(
                name=k.name, sha256=hash_key(k.secret), tenant=k.tenant, principals=k.principals, write=k.write
            )
            for k in keys
        }
    )
    report = Report()
    with ExitStack() as stack:
        store = stack.enter_context(CARStore.open(workdir / "store", load_policy("security-advisory"), embedder=embedder))
        ingested = store.ingest(seed(world), progress=False)
        assert not ingested.errors, ingested.errors
        services = [Service(store, api_keys=api_keys, anchors=mode, timeout_ms=30_000) for mode in ("bm25", "hybrid")]
        if leaky:
            for service in services:

                def answer_as_nobody(body, caller, answer=service.answer):
                    return answer(body, None)

                service.answer = answer_as_nobody  # type: ignore[method-assign]
        urls = [stack.enter_context(serving(s, log_level="info", access_log=True)) for s in services]
        capture = stack.enter_context(capturing(log_level))  # after uvicorn has set its loggers up
        clients = [stack.enter_context(httpx.Client(base_url=url, timeout=60)) for url in urls]
        started = time.perf_counter()
        asked: list[Request] = []
        for number in range(requests):
            request = next_request(world, keys)
            asked.append(request)
            capture.request = number
            headers = {**request.headers, **({"Content-Type": "application/json"} if request.raw is not None else {})}
            sending = {"content": request.raw} if request.raw is not None else {"json": request.body}
            got = clients[request.hybrid].request(
                request.method, request.path, headers=headers, **(sending if request.method == "POST" else {})
            )
            capture.request = -1
            report.statuses[f"{request.method} {request.path} {got.status_code}"] += 1
            report.counts[request.kind.split(" as ")[0]] += 1
            where = f"request {number} ({request.kind})"
            if got.status_code not in request.expected:
                report.violation(
                    "status", f"{where}: status {got.status_code}, expected {sorted(request.expected)}: {got.text[:300]}"
                )
            for problem in leaks(got.text + json.dumps(dict(got.headers)), request.key, request.sent(), world, keys):
                report.violation("response", f"{where}: the response shows {problem}")
            if got.status_code == 200:
                for record in request.stores:
                    world.store(record)
                if request.path == "/retrieve":
                    _count_reach(report, world, got)
        report.seconds = time.perf_counter() - started
        report.requests = requests
        for number, line in capture.lines:
            logged = asked[number] if number >= 0 else None
            for problem in leaks(line, logged.key if logged else None, logged.sent() if logged else "", world, keys):
                where = f"of request {number}" if logged else "between requests"
                report.violation(f"log line ({line.split(':')[0]})", f"log line {where} shows {problem}: {line[:200]}")
        report.counts["log lines"] = len(capture.lines)
        metrics = "".join(
            client.get("/metrics", headers={"Authorization": f"Bearer {keys[0].secret}"}).text for client in clients
        )
        for problem in check_metrics(metrics, keys):
            report.violation("/metrics", problem)
        report.counts["metric samples"] = sum(len(f.samples) for f in text_string_to_metric_families(metrics))
        stored = {d: shown_record(r).fingerprint() for d, r in store.records.items()}  # as their writers gave them
        expected = {k: Record.model_validate(r).fingerprint() for k, r in world.records.items()}
        differ = sorted(d for d in stored.keys() | expected.keys() if stored.get(d) != expected.get(d))
        if differ:
            report.violation("store", f"the store differs from what the accepted writes stored: {differ[:5]}")
        report.counts["records held"] = len(stored)
    return report


def _count_reach(report: Report, world: World, got: httpx.Response) -> None:
    """Evidence that the fuzz reaches what the gate guards: answers with a hidden superseder, and
    answers that show a restricted record (a tenant's, or a principal's) to a key that may read it."""
    report.counts["answers with a hidden superseder"] += any(r["hidden_superseder"] for r in got.json()["reranked"])
    restricted = [r for m in MARKER.findall(got.text) for r in world.marked.get(m, ())]
    report.counts["answers showing a restricted record the key may read"] += any(
        r.get("tenant") or r.get("allowed_principals") for r in restricted
    )


def format_report(report: Report, header: ResultsHeader) -> str:
    lines = [
        f"# car-rag serve: tenancy fuzz ({report.requests} requests)",
        "",
        f"`{header.command}`; commit {header.commit}; {report.seconds:.0f} s of requests. What is sent and checked: the "
        "docstring of `evals/serve_tenancy_fuzz.py`.",
        "",
        f"**Violations: {len(report.violations)}** (a marker of a record the key may not read in a response, a log "
        "line or /metrics; a key anywhere; a status the request's key and body do not allow; a store that differs "
        "from what the accepted writes stored).",
        "",
        *[f"* found in {where}: {n}" for where, n in sorted(report.found_in.items())],
        *([""] if report.found_in else []),
        "| what | count |",
        "|---|---|",
        *[f"| {what} | {n} |" for what, n in sorted(report.counts.items())],
        "",
        "| request | status | count |",
        "|---|---|---|",
        *[f"| {what.rsplit(' ', 1)[0]} | {what.rsplit(' ', 1)[1]} | {n} |" for what, n in sorted(report.statuses.items())],
        "",
        *[f"* {v}" for v in report.violations[:20]],
    ]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=5000)
    parser.add_argument("--seed", type=int, default=19)
    parser.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO"], help="the root logger's, captured")
    parser.add_argument("--out", type=Path, help="write the counts here (Markdown)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        report = run_fuzz(args.requests, seed_value=args.seed, workdir=Path(folder), log_level=getattr(logging, args.log_level))
    text = format_report(report, results_header(__file__))
    print(text)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)
    sys.exit(1 if report.violations else 0)


if __name__ == "__main__":
    main()
