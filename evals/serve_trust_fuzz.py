"""Adversarial fuzz of the trust model (issue 32): randomized writes through a real `car-rag serve`
(uvicorn on loopback, a real store: MiniLM, embedded Chroma) by three tenants' writer keys, a
public writer that is no publisher and a publisher, then every reader's view checked.

The writes are the issue's attacks, mixed with each tenant's own writes: explicit ``supersedes`` to
other tenants' and public ids (up to every public id at once), waiting edges to the ids a tenant
writes next, ``patch_release`` records in other tenants' scopes (dated at random, or 9999-12-31),
records squatting the id a tenant writes next, public records naming tenants' ids, public patches
from no publisher in tenants' scopes, and a publisher's public patches in tenants' scopes
(trusted: the control that voiding across tenants still happens where it should).

Integrity, checked at the end for each reader (each tenant, a tenant principal that reads its
embargoed records, a public reader): every record the reader may read is resolved as the only
anchor (Stages 2-3, :func:`resolve_authority`) over the store's graph, and over a graph of the
records of the reader's own tenant and the public ones only. Another tenant's records must change
nothing: any difference in a result (status, superseders, edges, disputes, the hidden flag, order)
is an integrity change. Leaks: each write's answer may name only records its key may read (an id
named is the writer's own tenant's record of that id where there is one, else the public one). A
tenant's own write refused because another tenant took its id first is counted: tenants' doc_ids
are namespaced, so there should be none.

``--shared``: the same writes alternate between two ``car-rag serve`` processes over one store in
a throwaway PostgreSQL (vectors in pgvector); once both have applied every write (their /readyz
head), the store's graph is checked as above, and each reader asks each server about every scope:
each answer must be what Stages 2-3 give over the reader's own tenant's and the public records
alone, from the answer's own anchors.

    python evals/serve_trust_fuzz.py --writes 5000 --out evals/results/serve/trust-fuzz.md
    python evals/serve_trust_fuzz.py --writes 300 --trust-everything   # must find changes
    python evals/serve_trust_fuzz.py --writes 5000 --shared --out evals/results/serve/trust-fuzz-shared.md
"""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import argparse  # noqa: E402
import functools  # noqa: E402
import itertools  # noqa: E402
import json  # noqa: E402
import random  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from collections import Counter  # noqa: E402
from collections.abc import Callable, Iterator, Sequence  # noqa: E402
from contextlib import AbstractContextManager, ExitStack, contextmanager, nullcontext  # noqa: E402
from dataclasses import dataclass, field, replace  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402
from unittest import mock  # noqa: E402

import httpx  # noqa: E402

from car_rag import CallerContext, CARStore, Embedder, load_policy  # noqa: E402
from car_rag.channels.fusion import FusedHit  # noqa: E402
from car_rag.graph import AuthorityGraph  # noqa: E402
from car_rag.namespacing import as_shown  # noqa: E402
from car_rag.policy import Policy  # noqa: E402
from car_rag.postgres.fixture import throwaway_postgres  # noqa: E402
from car_rag.records import Record, tenant_key  # noqa: E402
from car_rag.resolution import Anchor, RetrievedRecord, resolve_authority  # noqa: E402
from car_rag.serve.keys import ApiKey, ApiKeys, hash_key  # noqa: E402
from car_rag.serve.schema import RankedRecord  # noqa: E402
from car_rag.serve.service import Service  # noqa: E402
from car_rag.store import ingest  # noqa: E402
from car_rag.trust import Trust  # noqa: E402
from car_rag_evals.servers import car_rag_serve, serving  # noqa: E402

TENANTS = ("acme", "globex", "initech")
WRITERS = (*TENANTS, "owner", "nvd")
"""A writer key per tenant; ``owner``: public records, no publisher; ``nvd``: a publisher."""
READERS = {
    **{t: CallerContext(t) for t in TENANTS},
    "acme-legal": CallerContext("acme", {"legal"}),
    "public": CallerContext(),
}
FAULT = (
    "from car_rag.store import ingest\nfrom car_rag.trust import Trust\n\n"
    "Trust.distrust = lambda *_: None\ningest.tenant_key = lambda tenant, doc_id: doc_id\n"
)
"""``--trust-everything --shared``: the servers' ``sitecustomize``, every edge trusted and one doc_id space
for all tenants, as before issue 32."""
ANSWER_K = 100
"""Records asked of each answer checked: the most /retrieve gives, so that it shows most anchors."""
MAX_UNSHOWN_ANCHORS = 4
"""Anchors an answer may rank past :data:`ANSWER_K` and still be checked in order (their 4! orders tried)."""
MAX_ANCHOR_CHOICES = 64
"""Ways an answer's anchors may name records tried at most (:func:`anchor_choices`): each id the
reader's tenant and the public both hold may stand for either record."""
ANSWER_TIMEOUT_MS = 60_000
"""The servers' deadline per request: this checks integrity, not latency, and a slow answer on a loaded
machine would otherwise be a 503 that ends the run (the default is 2 s)."""
KINDS = (
    *("own", "own", "explicit", "all-public", "waiting", "rule-scope", "far-future", "squat", "public-claim", "publisher"),
    "public-rule",
)
"""``public-rule``: a public patch from no publisher in a tenant's scope (half of them dated 9999-12-31):
with tenants' ids namespaced, the attack only the trust check stops for a reader who reads both."""


@dataclass
class Report:
    writes: int = 0
    statuses: Counter[str] = field(default_factory=Counter)
    kinds: Counter[str] = field(default_factory=Counter)
    checked: Counter[str] = field(default_factory=Counter)
    answers: Counter[str] = field(default_factory=Counter)
    """Answers from the servers checked, by reader (:func:`check_answers`)."""
    answers_unordered: int = 0
    """Of those, answers checked record by record but not in order (:func:`unordered`)."""
    answers_by_alternative: int = 0
    """Of those, answers that only another way than the first of naming their anchors' records reproduced
    (:func:`anchor_choices`)."""
    answer_changes: int = 0
    changes: list[str] = field(default_factory=list)
    tie_breaks: int = 0
    """Results that differ only in a record's ``anchor_id`` (see :func:`check`)."""
    leaks: list[str] = field(default_factory=list)
    claims: int = 0
    blocked_by_squat: int = 0
    servers: int = 1
    seconds: float = 0.0


@dataclass
class World:
    """What the fuzz knows: each tenant's scopes, the ids written, and each tenant's next id."""

    rng: random.Random
    scopes: dict[str | None, list[dict[str, str]]] = field(default_factory=dict)
    ids: dict[str | None, list[str]] = field(default_factory=dict)
    counter: Counter[str | None] = field(default_factory=Counter)

    def next_id(self, tenant: str | None) -> str:
        return f"{tenant or 'pub'}-r{self.counter[tenant]}"

    def others(self, tenant: str | None) -> list[str | None]:
        return [t for t in (*TENANTS, None) if t != tenant]

    def record(self, tenant: str | None, doc_type: str, scope: dict[str, str], **extra: Any) -> dict[str, Any]:
        day = self.rng.randint(1, 3000)
        return {
            "doc_type": doc_type,
            "text": f"{scope['package']} {scope['cve_id']} {doc_type.replace('_', ' ')} {self.rng.getrandbits(24):06x}",
            "scope": scope,
            "published_at": f"{2018 + day // 365}-{1 + day % 12:02d}-{1 + day % 28:02d}",
            **({"tenant": tenant} if tenant else {}),
            **extra,
        }


def keys() -> tuple[ApiKeys, dict[str, str]]:
    """A key per writer and per reader (a tenant's writer key is its reader's too); their secrets by name."""
    secrets = {name: f"k-{name}" for name in (*WRITERS, *READERS)}
    by_hash = {
        hash_key(secret): ApiKey(
            name=name,
            sha256=hash_key(secret),
            tenant=READERS[name].tenant if name in READERS else None,
            principals=tuple(READERS[name].principals) if name in READERS else (),
            write=name in WRITERS,
            publisher=name == "nvd",
        )
        for name, secret in secrets.items()
    }
    return ApiKeys(by_hash), secrets


def seed(world: World, per_tenant: int) -> list[dict[str, Any]]:
    """Per tenant and for the public: scopes each with a disclosure, a patch, and (a tenant's) an
    embargoed patch only its ``legal`` principal reads."""
    records = []
    for tenant in (*TENANTS, None):
        world.scopes[tenant] = [
            {"package": f"{tenant or 'pub'}pkg{n}", "cve_id": f"CVE-2099-{len(world.scopes) * 1000 + n}"}
            for n in range(per_tenant)
        ]
        for scope in world.scopes[tenant]:
            for doc_type in ("vulnerability_disclosure", "patch_release"):
                records.append({"doc_id": world.next_id(tenant), **world.record(tenant, doc_type, scope)})
                world.counter[tenant] += 1
            if tenant and world.rng.random() < 0.3:
                embargoed = world.record(tenant, "patch_release", scope, allowed_principals=["legal"])
                records.append({"doc_id": world.next_id(tenant), **embargoed})
                world.counter[tenant] += 1
    for r in records:
        world.ids.setdefault(r.get("tenant"), []).append(r["doc_id"])
    return records


def attack(world: World, kind: str) -> tuple[str, dict[str, Any]]:
    """One write: the key that sends it and its record."""
    rng = world.rng
    writer = rng.choice(TENANTS)
    tenant: str | None = writer
    victim = rng.choice(world.others(writer))
    victim_scope = rng.choice(world.scopes[victim])
    victim_ids = world.ids.get(victim, [])
    if kind == "own":  # a tenant's (or the public's) own next record, in one of its scopes
        writer = rng.choice((*TENANTS, "owner"))
        tenant = writer if writer in TENANTS else None
        doc_type = rng.choice(("vulnerability_disclosure", "patch_release"))
        extra = {"allowed_principals": ["legal"]} if tenant and rng.random() < 0.2 else {}
        doc_id = world.next_id(tenant)
        world.counter[tenant] += 1
        return writer, {"doc_id": doc_id, **world.record(tenant, doc_type, rng.choice(world.scopes[tenant]), **extra)}
    if kind in ("public-claim", "publisher", "public-rule"):
        writer, tenant = ("nvd" if kind == "publisher" else "owner"), None
        victim = rng.choice(TENANTS)
        victim_scope, victim_ids = rng.choice(world.scopes[victim]), world.ids[victim]
    doc_id = f"{writer}-x{world.counter[writer]}"
    world.counter[writer] += 1
    if kind == "squat":
        return writer, {"doc_id": world.next_id(victim), **world.record(tenant, "patch_release", victim_scope)}
    record = world.record(tenant, "patch_release", victim_scope)
    if kind == "explicit" or kind == "public-claim":
        record = {**world.record(tenant, "note", victim_scope), "supersedes": rng.sample(victim_ids, min(len(victim_ids), 10))}
    elif kind == "all-public":
        record = {**world.record(tenant, "note", victim_scope), "supersedes": list(world.ids[None])}
    elif kind == "waiting":
        ahead = [f"{victim or 'pub'}-r{world.counter[victim] + n}" for n in range(5)]
        record = {**world.record(tenant, "note", victim_scope), "supersedes": ahead}
    elif kind == "far-future" or (kind == "public-rule" and rng.random() < 0.5):
        record["published_at"] = "9999-12-31"
    return writer, {"doc_id": doc_id, **record}


def readable(caller: CallerContext, records: dict[str, Record], ids: list[str]) -> bool:
    """Whether ``caller`` may read every record ``ids`` names, as it names them: its own tenant's
    record of an id, else the public one."""
    return all(any(k in records and caller.can_read(records[k]) for k in held_as(caller, records, d)) for d in ids)


def held_as(caller: CallerContext, records: dict[str, Record], doc_id: str) -> list[str]:
    """The keys a store may hold the record ``caller`` names ``doc_id`` under, its own tenant's first."""
    own = tenant_key(caller.tenant, doc_id)
    return [k for k in dict.fromkeys((own, doc_id)) if k in records]


def anchor_keys(caller: CallerContext, records: dict[str, Record], shown: dict[str, Any]) -> list[str]:
    """The keys of the records an answer may show as ``shown``: those of its doc_id, the caller's
    tenant's first, narrowed by type and date where ``shown`` has them. Both the tenant's record of an
    id and the public one may fit: the answer does not tell which the server anchored on
    (:func:`anchor_choices` tries each)."""
    keys = held_as(caller, records, shown["doc_id"])

    def dated(record: Record) -> str | None:
        return None if record.published_at is None else record.published_at.isoformat()

    fits = [
        k
        for k in keys
        if "doc_type" not in shown or (records[k].doc_type, dated(records[k])) == (shown["doc_type"], shown["published_at"])
    ]
    return fits or keys or [shown["doc_id"]]


@contextmanager
def servers(
    shared: bool,
    workdir: Path,
    policy: Policy,
    embedder: Embedder,
    api_keys: ApiKeys,
    seeded: list[dict[str, Any]],
    trust_everything: bool = False,
) -> Iterator[tuple[list[str], Callable[[], AbstractContextManager[CARStore]]]]:
    """The servers the writes go to, and how to open the store as they hold it once the writes are
    done. One server in this process over embedded Chroma; or, ``shared``, two ``car-rag serve``
    processes over one store in a throwaway PostgreSQL (vectors in pgvector), each following the
    other's writes through the change feed (what ``--workers 2`` runs, but each on a port of its
    own, so that the writes alternate between them and every read goes through both).
    ``trust_everything`` makes the fault in those processes too, through a ``sitecustomize``."""
    if not shared:
        with CARStore.open(workdir / "store", policy, embedder=embedder) as store:
            assert store.ingest(seeded, progress=False).errors == []
            with serving(Service(store, api_keys=api_keys, anchors="bm25", timeout_ms=ANSWER_TIMEOUT_MS)) as url:
                yield [url], lambda: nullcontext(store)
        return
    schema = "trust_fuzz"
    workdir.mkdir(parents=True, exist_ok=True)
    with throwaway_postgres() as pg:

        def open_shared(folder: str) -> CARStore:
            return CARStore.open(
                workdir / folder,
                policy,
                embedder=embedder,
                authority_url=pg.url,
                authority_schema=schema,
                vector_store="pgvector",
            )

        with open_shared("build") as store:
            assert store.ingest(seeded, progress=False).errors == []
        keys_file = workdir / "keys.json"
        keys_file.write_text(json.dumps({"keys": [k.model_dump(exclude_defaults=True) for k in api_keys.by_hash.values()]}))
        options = [
            *("--authority-schema", schema, "--anchors", "bm25"),
            *("--api-keys", str(keys_file), "--timeout-ms", str(ANSWER_TIMEOUT_MS)),
        ]
        env = {"CAR_RAG_AUTHORITY_URL": pg.url}
        if trust_everything:
            (workdir / "fault").mkdir()
            (workdir / "fault" / "sitecustomize.py").write_text(FAULT)
            env["PYTHONPATH"] = os.pathsep.join([str(workdir / "fault"), os.environ.get("PYTHONPATH", "")])
        with (
            car_rag_serve(workdir, "--store", str(workdir / "cache-1"), *options, env=env) as one,
            car_rag_serve(workdir, "--store", str(workdir / "cache-2"), *options, env=env) as two,
        ):
            yield [one, two], lambda: open_shared("check")


def run_fuzz(
    writes: int,
    *,
    seed_value: int = 32,
    per_tenant: int = 20,
    workdir: Path,
    embedder: Embedder | None = None,
    shared: bool = False,
    trust_everything: bool = False,
) -> Report:
    """``writes`` attacks, spread over the servers in turn; then each reader's view of the store
    (:func:`check`) and, once every server has applied every write, each reader's answers from
    every server (:func:`check_answers`). ``trust_everything``: the fault this fuzz must find, every
    edge trusted and one doc_id space for all tenants, as before issue 32."""
    report, world = Report(), World(random.Random(seed_value))
    api_keys, secrets = keys()
    started = time.perf_counter()
    policy = load_policy("security-advisory")
    seeded = seed(world, per_tenant)
    answered: list[tuple[str, str, list[str]]] = []
    with ExitStack() as stack:
        if trust_everything:
            stack.enter_context(mock.patch.object(Trust, "distrust", lambda *_: None))
            stack.enter_context(mock.patch.object(ingest, "tenant_key", lambda tenant, doc_id: doc_id))
        urls, open_store = stack.enter_context(
            servers(shared, workdir, policy, embedder or Embedder(), api_keys, seeded, trust_everything)
        )
        client = stack.enter_context(httpx.Client(timeout=120))
        for n in range(writes):
            kind = world.rng.choice(KINDS)
            writer, record = attack(world, kind)
            got = client.post(
                f"{urls[n % len(urls)]}/records", json=record, headers={"Authorization": f"Bearer {secrets[writer]}"}
            )
            report.writes += 1
            report.kinds[kind] += 1
            report.statuses[f"{kind} {got.status_code}"] += 1
            if got.status_code == 200:
                world.ids.setdefault(record.get("tenant"), []).append(record["doc_id"])
                answer = got.json()
                named = answer["newly_superseded"] + [d for e in answer["new_edges"] for d in (e["superseder"], e["target"])]
                answered.append((kind, writer, named))
            elif kind == "own" and "taken" in got.text:  # namespaced ids: none expected
                report.blocked_by_squat += 1
        with open_store() as store:
            caught_up(client, urls, secrets["public"], store.head)
            for kind, writer, named in answered:  # ids are never taken over, so the final store tells who may read them
                if not readable(READERS.get(writer, CallerContext()), store.records, named):
                    report.leaks.append(f"{kind} by {writer}: the answer names {named}")
            graph = store.graph
            report.claims = sum(1 for e in graph.disputed_edges() if e.untrusted)
            check(graph, report)
            check_answers(client, urls, graph, secrets, world, report)
    report.servers = len(urls)
    report.seconds = time.perf_counter() - started
    return report


def caught_up(client: httpx.Client, urls: list[str], secret: str, head: Any, timeout_s: float = 120.0) -> None:
    """Wait until every server has applied the change feed up to ``head`` (its /readyz says so)."""
    deadline = time.monotonic() + timeout_s
    for url in urls:
        while (seen := client.get(f"{url}/readyz", headers={"Authorization": f"Bearer {secret}"}).json().get("head")) != head:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{url} has applied the feed up to {seen}, not {head}, after {timeout_s:.0f} s")
            time.sleep(0.1)


def own_graph(graph: AuthorityGraph, caller: CallerContext) -> AuthorityGraph:
    """The graph of the caller's own tenant's records and the public ones alone: what no other
    tenant's record may change."""
    own = AuthorityGraph(graph.policy)
    for record in graph.records.values():
        if record.tenant in (None, caller.tenant):
            own.add(record)
    return own


def check(graph: AuthorityGraph, report: Report) -> None:
    """Each reader's results over the store's graph against those over its own tenant's and the
    public records alone, each record it may read the only anchor."""
    for name, caller in READERS.items():
        own = own_graph(graph, caller)
        for doc_id, record in graph.records.items():
            if not caller.can_read(record):
                continue
            got, want = (
                resolve_authority(g, g.policy, "", [Anchor(doc_id, 1)], caller, scope_ids={}).to_dict() for g in (graph, own)
            )
            del got["timings_ms"], want["timings_ms"]
            report.checked[name] += 1
            compare(report, f"{name} reading {doc_id}", got, want)


def check_answers(
    client: httpx.Client, urls: list[str], graph: AuthorityGraph, secrets: dict[str, str], world: World, report: Report
) -> None:
    """Each reader's answer from every server to a question about each scope (its own, the public's
    and other tenants'), against Stages 2-3 over its own tenant's and the public records alone from
    the answer's own anchors and scope values: what Stage 1 ranks is not integrity (its statistics
    are issue 32 item 2), what the anchors void is. Each ranked record is compared whole but for
    its scope probability (the answer carries only the posterior's top scopes).

    The anchors are the answer's candidates marked so, each at the rank the latent-scope step gave
    it: shown on the anchors the answer ranks (``stage1``), not on those past its :data:`ANSWER_K`
    records. Those take the ranks left, in every order (:func:`anchor_orders`). An anchor is named
    by the id its writer gave, which the reader's tenant and the public may both hold: each record
    it may stand for is tried (:func:`anchor_choices`). The answer is what the reference gives for
    one of these, or it is an integrity change. Past :data:`MAX_UNSHOWN_ANCHORS` unshown anchors,
    each record is checked but not the order (:func:`unordered`)."""
    for name, caller in READERS.items():
        own = own_graph(graph, caller)
        for scope in (s for scopes in world.scopes.values() for s in scopes):
            query = f"is {scope['package']} still vulnerable to {scope['cve_id']}?"
            for url in urls:
                got = client.post(
                    f"{url}/retrieve",
                    json={"query": query, "k": ANSWER_K},
                    headers={"Authorization": f"Bearer {secrets[name]}"},
                )
                got.raise_for_status()
                answer = got.json()
                choices = anchor_choices(answer, functools.partial(anchor_keys, caller, own.records))
                match = tie = first = None
                for attempt in references(answer, own, caller, choices):
                    _, _, shown, want = attempt
                    if shown == want:
                        match = attempt
                        break
                    first = first or attempt
                    tie = tie or (attempt if _without_anchor_ids(shown) == _without_anchor_ids(want) else None)
                found = match or tie or first
                assert found is not None  # every choice has one order at least
                choice, ordered, shown, want = found
                report.answers[name] += 1
                report.answers_unordered += not ordered
                report.answers_by_alternative += choice > 0 and (match or tie) is not None
                report.answer_changes += compare(report, f"{name} asking {query!r} at {url}", shown, want)


def references(
    answer: dict[str, Any], own: AuthorityGraph, caller: CallerContext, choices: list[tuple[list[FusedHit], list[FusedHit]]]
) -> Iterator[tuple[int, bool, dict[str, Any], dict[str, Any]]]:
    """For each way the answer's anchors may name records (``choices``) and each order of those it
    does not show: the choice's index, whether it is checked in order, what the answer shows and
    what the reference gives (lazily: the caller stops at the first that reproduces the answer)."""
    shown = {"records": [_shown(r) for r in answer["reranked"]]}
    for n, (ranked, unshown) in enumerate(choices):
        orders, ordered = anchor_orders(ranked, unshown)
        if not ordered:
            yield n, False, *unordered(answer, own, caller, orders[0])
            continue
        for anchors in orders:
            query, scope_ids = answer["query"], answer["diagnostics"]["scope_ids"]
            result = resolve_authority(own, own.policy, query, anchors, caller, scope_ids=scope_ids)
            yield n, True, shown, {"records": [_answered(r) for r in as_shown(result).top(ANSWER_K)]}


def anchor_choices(
    answer: dict[str, Any], keys: Callable[[dict[str, Any]], list[str]]
) -> list[tuple[list[FusedHit], list[FusedHit]]]:
    """The ways the answer's anchors may name records, at most :data:`MAX_ANCHOR_CHOICES`: the
    anchors it ranks at their ranks and those it does not show (rank 0: :func:`anchor_orders` ranks
    them), each by one of its ``keys``, no record twice. A candidate is marked ``anchor`` when a
    record of its shown id is one, so of two candidates of one id (the reader's tenant's and the
    public record) either may be, or both. The first choice is the one the oracle made before it
    tried others: each ranked anchor's first key, a candidate of a ranked anchor's id none."""
    shown = [r for r in answer["reranked"] if r["stage1"] is not None]
    marked = [c for c in answer["candidates"] if c["anchor"]]
    for r in shown:  # the candidate each ranked anchor is: its id and Stage-1 score
        same = [c for c in marked if c["doc_id"] == r["doc_id"]]
        if same:
            marked.remove(next((c for c in same if c["score"] == r["stage1"]["score"]), same[0]))
    ranked_ids = {r["doc_id"] for r in shown}
    twins = Counter(c["doc_id"] for c in marked)
    options: list[Sequence[str | None]] = [keys(r) for r in shown] + [
        [None, *keys(c)] if c["doc_id"] in ranked_ids else [*keys(c), *([None] if twins[c["doc_id"]] > 1 else [])] for c in marked
    ]

    def possible(picks: tuple[str | None, ...]) -> bool:
        named = [k for k in picks if k is not None]
        left = {c["doc_id"] for c, k in zip(marked, picks[len(shown) :]) if k is not None}
        return len(named) == len(set(named)) and {c["doc_id"] for c in marked} <= left | ranked_ids

    choices = []
    ways = list(itertools.islice(filter(possible, itertools.product(*options)), MAX_ANCHOR_CHOICES))
    for picks in ways or [next(itertools.product(*options))]:  # none possible: the first, to be reported
        ranked = [_hit(key, r["stage1"]) for r, key in zip(shown, picks) if key is not None]
        unshown = [_candidate_hit(key, c) for c, key in zip(marked, picks[len(shown) :]) if key is not None]
        choices.append((ranked, unshown))
    return choices


def anchor_orders(ranked: list[FusedHit], unshown: list[FusedHit]) -> tuple[list[list[FusedHit]], bool]:
    """The ``ranked`` anchors at their ranks, for each way the ``unshown`` ones may take the ranks
    left; past :data:`MAX_UNSHOWN_ANCHORS` of them, one way only (Stage-1 order), and False."""
    free = sorted(set(range(1, len(ranked) + len(unshown) + 1)) - {h.rank for h in ranked})
    ordered = len(unshown) <= MAX_UNSHOWN_ANCHORS
    return [
        ranked + [replace(h, rank=rank) for h, rank in zip(unshown, ranks)]
        for ranks in (itertools.permutations(free) if ordered else [free])
    ], ordered


def _hit(key: str, hit: dict[str, Any]) -> FusedHit:
    return FusedHit(key, hit["score"], hit["rank"], hit["channels"], {}, hit["contributions"])


def _candidate_hit(key: str, candidate: dict[str, Any]) -> FusedHit:
    """An anchor the answer does not show, unranked (rank 0: :func:`anchor_orders` ranks it)."""
    channels = candidate["channels"].items()
    contributions = {n: ch["contribution"] for n, ch in channels if ch["contribution"] is not None}
    return FusedHit(key, candidate["score"], 0, {n: ch["score"] for n, ch in channels}, {}, contributions)


def unordered(
    answer: dict[str, Any], own: AuthorityGraph, caller: CallerContext, anchors: list[FusedHit]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Each record the answer shows, and the same record in the reference, but for its rank, chain
    (``anchor_id``) and role: which records a result holds and what each voids, is voided by or
    disputes follow from the anchors whatever their ranks; only the order and the chain a record is
    listed under need the ranks of the anchors the answer does not show."""
    query, scope_ids = answer["query"], answer["diagnostics"]["scope_ids"]
    result = as_shown(resolve_authority(own, own.policy, query, anchors, caller, scope_ids=scope_ids))
    reference: dict[str, list[dict[str, Any]]] = {}
    for r in result.ranked:  # the reader's tenant's record of an id and the public one are shown under that id
        reference.setdefault(r.doc_id, []).append(_listed(_answered(r)))
    shown = [_listed(r) for r in answer["reranked"]]
    return {"records": shown}, {"records": [_taken(r, reference.get(r["doc_id"], [])) for r in shown]}


def _taken(record: dict[str, Any], held: list[dict[str, Any]]) -> dict[str, Any]:
    """The reference's record of ``record``'s id that it is, else the first, taken out of ``held``
    (two records shown under one id are two of the reference's); none left: {} (an integrity change)."""
    taken = next((r for r in held if r == record), held[0] if held else {})
    if held:
        held.remove(taken)
    return taken


def _listed(record: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in _shown(record).items() if k not in ("rank", "anchor_id", "role")}


def _answered(record: RetrievedRecord) -> dict[str, Any]:
    """``record`` as /retrieve gives it (its response schema, every field it writes), for an answer's
    record to be compared with."""
    return _shown(RankedRecord.model_validate(record.to_dict()).model_dump(mode="json"))


def _shown(record: dict[str, Any]) -> dict[str, Any]:
    """A ranked record as both sides can state it: the served form's unrequested ``record`` and
    ``annotations`` (None) and its ``filtered_superseder`` (always written) left out, as
    ``to_dict`` writes the flag only when set and no filter is asked here."""
    return {
        k: v for k, v in record.items() if k not in ("scope_probability", "text", "record", "annotations", "filtered_superseder")
    }


def compare(report: Report, what: str, got: dict[str, Any], want: dict[str, Any]) -> bool:
    """Whether ``got`` differs from ``want`` in more than a tie (:func:`_without_anchor_ids`): an
    integrity change, recorded."""
    if got != want and _without_anchor_ids(got) == _without_anchor_ids(want):
        report.tie_breaks += 1
    elif got != want:
        report.changes.append(f"{what}: {got['records']} != {want['records']}")
        return True
    return False


def _without_anchor_ids(result: dict[str, Any]) -> dict[str, Any]:
    """A result without each record's ``anchor_id``: which of two chains of the same Stage-1 rank a
    record is listed under is a tie broken by the order Python iterates a set of ids in, which
    depends on the string hash seed and on each set's history (the ids it holds, other tenants'
    in a shared scope bucket among them, and the order they came in). The two graphs compared
    here differ in both, so they may break it differently: counted apart, not as integrity."""
    return {**result, "records": [{k: v for k, v in r.items() if k != "anchor_id"} for r in result["records"]]}


def render(report: Report, args: argparse.Namespace) -> str:
    lines = [
        "# Trust-model fuzz (issue 32)",
        "",
        f"`python evals/serve_trust_fuzz.py --writes {args.writes} --seed {args.seed}"
        f"{' --shared' if args.shared else ''}{' --trust-everything' if args.trust_everything else ''}`: "
        f"{report.writes} writes through "
        + (
            "two `car-rag serve` processes over one store in a throwaway PostgreSQL (pgvector), in turn"
            if args.shared
            else "a real server (one process, embedded Chroma)"
        )
        + f" (loopback, BM25 anchors), {report.seconds:.0f} s on this machine.",
        "",
        f"- **integrity changes: {len(report.changes)}** (results of a reader that another tenant's records changed: "
        f"over the store's graph, and in the servers' answers: {report.answer_changes} of them)",
        f"- **leaks in write answers: {len(report.leaks)}**",
        f"- results that differ only in a record's `anchor_id` (a tie between chains of one Stage-1 rank, broken by "
        f"set iteration order; not counted above): {report.tie_breaks}",
        f"- answers checked record by record but not in order (more than {MAX_UNSHOWN_ANCHORS} anchors ranked past "
        f"the {ANSWER_K} records shown): {report.answers_unordered} of {sum(report.answers.values())}",
        f"- answers reproduced only with another record than the first for an id the reader's tenant and the public "
        f"both hold (each tried; up to {MAX_ANCHOR_CHOICES} ways): {report.answers_by_alternative} of "
        f"{sum(report.answers.values())}",
        f"- untrusted claims recorded (voiding nothing): {report.claims}",
        f"- a tenant's own write refused because another tenant squatted its next id: {report.blocked_by_squat} "
        "(tenants' doc_ids are namespaced: each tenant's own)",
        "",
        f"| reader | records checked (graph) | answers checked ({report.servers} server(s)) |",
        "|---|---:|---:|",
        *(f"| {name} | {n} | {report.answers[name]} |" for name, n in report.checked.items()),
        "",
        "| write kind | status | count |",
        "|---|---|---:|",
        *(f"| {k.split()[0]} | {k.split()[1]} | {n} |" for k, n in sorted(report.statuses.items())),
    ]
    if report.changes or report.leaks:
        lines += ["", "First findings:", "", *(f"- {line[:400]}" for line in (report.changes + report.leaks)[:10])]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--writes", type=int, default=5000)
    parser.add_argument("--seed", type=int, default=32)
    parser.add_argument("--out", type=Path)
    parser.add_argument(
        "--trust-everything",
        action="store_true",
        help="the fault this fuzz must find: every edge trusted and one doc_id space for all tenants, as before issue 32",
    )
    parser.add_argument(
        "--shared", action="store_true", help="two car-rag serve processes over one store in PostgreSQL (pgvector), in turn"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as workdir:
        report = run_fuzz(
            args.writes,
            seed_value=args.seed,
            workdir=Path(workdir),
            shared=args.shared,
            trust_everything=args.trust_everything,
        )
    text = render(report, args)
    print(text)
    if args.out:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
