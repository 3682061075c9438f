"""Seeded security-advisory corpora of any size, for the scale benchmark (``evals/perf/``,
``evals/serve/`` and ``evals/serve_scale.py``) and the tests of chunked ingest.

What makes authority retrieval hard is kept at every size:

* chains of depth 1–4: a vulnerability disclosure voided by 1–4 patch releases in turn
  (``later_patch`` voids each earlier fix), depth drawn 60/25/10/5 %;
* vocabulary-disjoint superseders: release notes never name the flaw, the component, the
  impact or the CVE (they share only generic words such as "input" or "cache" with some
  disclosures); they are tied to the disclosure by their scope metadata alone
  (``package``, ``cve_id``);
* shared scopes: a package holds many CVEs (``n // 200`` packages, 50..2,000; twelve attack
  kinds in four components each), and 5 % of
  fixing releases also name a second disclosure of their package in ``supersedes`` (one
  release fixed two advisories);
* distractors: 40 % of records are unpatched disclosures worded like the chained ones, 25 %
  maintenance release notes that fix nothing.

Queries ask about a chained disclosure in other words than its text, naming the version
the user runs (not the CVE); the gold record is the chain's last release (its active
frontier).

``gist`` is what a precomputed embedding stands for at sizes where encoding every text is
not the point (1M records on two cores): the attack, component and package, or the package
of a release note. :func:`gist_vectors` encodes each distinct gist once with the real model
and gives every record its gist's vector plus seeded noise (cosine ≈ 0.97 to the gist).

:func:`arrivals` are new records for a store built from a corpus (the streaming-insert
phases); :func:`generalised_policy` is ``security-advisory`` with issue 18's rules on.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

import numpy as np

from car_rag.policy import Policy, load_policy

if TYPE_CHECKING:
    from car_rag import CARStore

__all__ = ["SOURCES", "Corpus", "Query", "arrivals", "generalised_policy", "generate", "gist_vectors", "stream"]

ATTACKS = [  # (attack, components it shows up in, impact, how a user asks about it)
    (
        "prototype pollution",
        ["object merge helper", "query string parser", "config loader", "deep clone utility"],
        "inject properties into every object in the process",
        "poisoned object keys",
    ),
    (
        "path traversal",
        ["archive extraction routine", "static file server", "upload handler", "template resolver"],
        "write files outside the target directory",
        "directory escape",
    ),
    (
        "cross-site scripting",
        ["template renderer", "markdown converter", "error page", "admin dashboard"],
        "run script in a victim's browser",
        "script injection into pages",
    ),
    (
        "SQL injection",
        ["query builder", "search endpoint", "ORM filter", "reporting module"],
        "read or alter arbitrary database rows",
        "tampering with database queries",
    ),
    (
        "regular expression denial of service",
        ["input parser", "email validator", "user agent matcher", "URL router"],
        "stall the event loop with a crafted string",
        "catastrophic backtracking",
    ),
    (
        "server-side request forgery",
        ["URL fetcher", "webhook sender", "image proxy", "OAuth callback"],
        "reach internal services from the server",
        "forged internal requests",
    ),
    (
        "heap buffer overflow",
        ["image decoder", "font renderer", "compression codec", "packet parser"],
        "crash the process or execute code",
        "memory corruption on malformed input",
    ),
    (
        "authentication bypass",
        ["session middleware", "token verifier", "password reset flow", "SSO connector"],
        "act as another user without a password",
        "logging in as someone else",
    ),
    (
        "XML external entity injection",
        ["XML loader", "SVG sanitizer", "SOAP client", "feed reader"],
        "read local files through entity expansion",
        "entity expansion reading files",
    ),
    (
        "unsafe deserialization",
        ["object loader", "cache backend", "job queue worker", "session store"],
        "execute code by sending a crafted payload",
        "code execution from untrusted payloads",
    ),
    (
        "open redirect",
        ["login handler", "logout endpoint", "link shortener", "payment return page"],
        "send users to an attacker's site after login",
        "redirecting users to hostile sites",
    ),
    (
        "information disclosure",
        ["error reporter", "debug endpoint", "log formatter", "metrics exporter"],
        "leak secrets in verbose error pages",
        "secrets showing up in error output",
    ),
]
SEVERITIES = ["low", "moderate", "high", "critical"]
DISCLOSURE = [
    "{cve}: {attack} in the {component} of {package}. Versions before {fixed} allow a remote attacker to {impact}. "
    "Severity {severity}. No patched release is available at the time of this advisory.",
    "Security advisory for {package} ({cve}). The {component} is vulnerable to {attack}; an attacker can {impact}. "
    "Affected: all releases up to {affected}. Rated {severity}. Maintainers have been notified.",
    "{package} {affected} and earlier contain a {severity} {attack} flaw in the {component} ({cve}). "
    "Exploitation lets an attacker {impact}. Workarounds: none known.",
]
CHANGES = [
    "tightened handling of untrusted input in the core module",
    "refreshed documentation and examples",
    "upgraded bundled dependencies",
    "faster startup on large projects",
    "dropped support for end-of-life runtimes",
    "new configuration option for strict mode",
    "reduced memory use when streaming",
    "improved type annotations",
    "hardened defaults for production deployments",
    "fixed a rare race in the cache layer",
    "clearer log messages",
    "build now reproducible across platforms",
    "internal refactoring of the plugin loader",
    "test suite ported to CI matrix",
]
RELEASE = [
    "{package} {version} release notes. Changes: {c1}; {c2}; {c3}. Upgrading is recommended for all users.",
    "What's new in {package} {version}: {c1}, {c2} and {c3}. Thanks to all contributors.",
    "Release {version} of {package} is out. Highlights: {c1}. Also: {c2}; {c3}.",
]
QUESTION = [  # users name the version they run, not the CVE
    "Is the {short} problem in the {component} of {package} {affected} fixed yet?",
    "Can attackers still exploit {package} {affected} through {short} in its {component}?",
    "We run {package} {affected}: has a fix shipped for the {short} issue in the {component}?",
]
_SYLLABLES = [
    "ka",
    "lo",
    "mi",
    "zen",
    "tor",
    "vex",
    "qui",
    "ra",
    "dash",
    "io",
    "fy",
    "plex",
    "nu",
    "gro",
    "sta",
    "lyn",
    "bo",
    "chi",
]
_BASE = datetime(2019, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class Query:
    query_id: str
    query: str
    gold_doc_ids: list[str]
    anchor_doc_ids: list[str]
    depth: int


@dataclass
class Corpus:
    records: list[dict]
    gists: list[str]
    """Per record, in order: the text its precomputed embedding stands for."""
    queries: list[Query]

    def __len__(self) -> int:
        return len(self.records)


def _package_names(count: int, rng: random.Random) -> list[str]:
    names: set[str] = set()
    while len(names) < count:
        syllables = range(rng.choice((2, 3)))
        names.add("".join(rng.choice(_SYLLABLES) for _ in syllables) + rng.choice(("", "js", "-core", "lib", "py")))
    return sorted(names)


def _version(rng: random.Random) -> tuple[int, int, int]:
    return rng.randrange(0, 9), rng.randrange(0, 30), rng.randrange(0, 20)


def _fmt(v: tuple[int, int, int]) -> str:
    return ".".join(map(str, v))


def _iter_records(n: int, rng: random.Random, packages: list[str]) -> Iterator[tuple[dict, str, dict | None]]:
    """(record, gist, chain info on a chain's disclosure) until ``n`` records."""
    made = 0
    serial = 0
    while made < n:
        serial += 1
        package = rng.choice(packages)
        day = _BASE + timedelta(days=rng.randrange(0, 2500))
        roll = rng.random()
        if roll < 0.25:  # a maintenance release that fixes nothing
            v = _version(rng)
            c = rng.sample(CHANGES, 3)
            text = rng.choice(RELEASE).format(package=package, version=_fmt(v), c1=c[0], c2=c[1], c3=c[2])
            yield (
                {
                    "doc_id": f"rel:{serial}",
                    "text": text,
                    "doc_type": "maintenance_release",
                    "scope": {"package": package},
                    "published_at": day.isoformat(),
                    "version": _fmt(v),
                },
                f"{package} release notes",
                None,
            )
            made += 1
            continue
        attack, components, impact, short = rng.choice(ATTACKS)
        component = rng.choice(components)
        cve = f"CVE-{2019 + rng.randrange(0, 7)}-{10000 + serial}"
        affected = _version(rng)
        fixed = (affected[0], affected[1], affected[2] + 1)
        disclosure_id = f"vuln:{serial}"
        text = rng.choice(DISCLOSURE).format(
            cve=cve,
            attack=attack,
            component=component,
            package=package,
            fixed=_fmt(fixed),
            affected=_fmt(affected),
            impact=impact,
            severity=rng.choice(SEVERITIES),
        )
        disclosure = {
            "doc_id": disclosure_id,
            "text": text,
            "doc_type": "vulnerability_disclosure",
            "scope": {"package": package, "cve_id": cve},
            "published_at": day.isoformat(),
        }
        gist = f"{attack} in the {component} of {package}"
        if roll < 0.65:  # an unpatched disclosure: a distractor
            yield disclosure, gist, None
            made += 1
            continue
        depth = rng.choices((1, 2, 3, 4), weights=(60, 25, 10, 5))[0]
        patches = []
        version = fixed
        for hop in range(depth):
            day += timedelta(days=rng.randrange(3, 90))
            c = rng.sample(CHANGES, 3)
            patches.append(
                {
                    "doc_id": f"fix:{serial}:{hop}",
                    "text": rng.choice(RELEASE).format(package=package, version=_fmt(version), c1=c[0], c2=c[1], c3=c[2]),
                    "doc_type": "patch_release",
                    "scope": {"package": package, "cve_id": cve},
                    "published_at": day.isoformat(),
                    "version": _fmt(version),
                }
            )
            version = (version[0], version[1], version[2] + 1)
        info = {
            "package": package,
            "component": component,
            "short": short,
            "affected": _fmt(affected),
            "gold": patches[-1]["doc_id"],
            "depth": depth,
            "anchor": disclosure_id,
        }
        yield disclosure, gist, info
        for patch in patches:
            yield patch, f"{package} release notes", None
        made += 1 + depth


def stream(n: int, *, seed: int = 7) -> Iterator[tuple[dict, str, dict | None]]:
    """The records of :func:`generate` one at a time, as (record, gist, chain info on a chain's
    disclosure): a corpus too large to hold (10M records) is written as it is made. From 400k
    records on (2,000 packages) a corpus is the first ``n`` records of any larger one of its seed."""
    return _stream(n, random.Random(seed))


def _stream(n: int, rng: random.Random) -> Iterator[tuple[dict, str, dict | None]]:
    packages = _package_names(min(2000, max(50, n // 200)), rng)
    last_disclosure_by_package: dict[str, str] = {}
    for made, (record, gist, info) in enumerate(_iter_records(n, rng, packages)):
        if made == n:
            return
        if record["doc_type"] == "patch_release" and record["doc_id"].endswith(":0"):
            other = last_disclosure_by_package.get(record["scope"]["package"])
            if other and rng.random() < 0.05:  # one release fixes a second advisory too
                record["supersedes"] = [other]
        if record["doc_type"] == "vulnerability_disclosure":
            last_disclosure_by_package[record["scope"]["package"]] = record["doc_id"]
        yield record, gist, info


def generate(n: int, *, seed: int = 7, queries: int = 200) -> Corpus:
    """``n`` records (the last chain is cut at ``n``) and up to ``queries`` questions."""
    records: list[dict] = []
    gists: list[str] = []
    chains: list[dict] = []
    rng = random.Random(seed)
    for record, gist, info in _stream(n, rng):  # the questions draw from the same generator, after the records
        records.append(record)
        gists.append(gist)
        if info is not None:
            chains.append(info)
    present = {r["doc_id"] for r in records}
    chains = [c for c in chains if c["gold"] in present]
    picked = rng.sample(chains, min(queries, len(chains)))
    qs = [Query(f"q{i}", rng.choice(QUESTION).format(**c), [c["gold"]], [c["anchor"]], c["depth"]) for i, c in enumerate(picked)]
    return Corpus(records, gists, qs)


def gist_vectors(corpus: Corpus, embedder, *, seed: int = 7, noise: float = 0.25, progress: bool = False) -> np.ndarray:
    """One unit vector per record: its gist's real embedding plus seeded Gaussian noise."""
    distinct = sorted(set(corpus.gists))
    base = embedder.encode(distinct, show_progress=progress)
    row = {g: i for i, g in enumerate(distinct)}
    rng = np.random.default_rng(seed)
    index = np.fromiter((row[g] for g in corpus.gists), dtype=np.int64, count=len(corpus.gists))
    vectors = np.empty((len(index), base.shape[1]), dtype=np.float32)
    for start in range(0, len(index), 65536):  # in slices: no second full-size array for the noise
        part = base[index[start : start + 65536]]
        part += rng.standard_normal(part.shape, dtype=np.float32) * (noise / np.sqrt(part.shape[1]))
        vectors[start : start + len(part)] = part / np.linalg.norm(part, axis=1, keepdims=True)
    return vectors


def arrivals(store: CARStore, count: int, seed: int) -> list[tuple[dict, str]]:
    """New records for a live store, each with the stored disclosure it is about: half patch
    releases voiding that disclosure (or the end of its chain), half new disclosures."""
    rng = random.Random(seed)
    disclosures = sorted(d for d, r in store.records.items() if r.doc_type == "vulnerability_disclosure")
    out = []
    for i in range(count):
        target = store.records[rng.choice(disclosures)]
        published = target.published_at
        assert published is not None  # every generated record is dated
        when = published.replace(year=published.year + 8).isoformat()
        package = target.scope["package"]
        if i % 2 == 0:
            record = {
                "doc_id": f"stream:fix:{seed}:{i}",
                "doc_type": "patch_release",
                "scope": dict(target.scope),
                "text": f"{package} {90 + i}.0.0 release notes. Changes: upgraded bundled dependencies.",
                "published_at": when,
                "version": f"{90 + i}.0.0",
            }
        else:
            cve = f"CVE-2030-{500000 + seed * 10000 + i}"
            record = {
                "doc_id": f"stream:vuln:{seed}:{i}",
                "doc_type": "vulnerability_disclosure",
                "scope": {"package": package, "cve_id": cve},
                "text": f"{cve}: heap buffer overflow in the image decoder of {package}.",
                "published_at": when,
            }
        out.append((record, target.doc_id))
    return out


SOURCES = ["vendor", "distro", "community"]
"""The release sources of :func:`generalised_policy`'s hierarchy, highest first (``metadata.source_level``)."""


def generalised_policy() -> Policy:
    """``security-advisory`` with the release-source hierarchy and an uncertain fix rule."""
    base = load_policy("security-advisory").model_dump()
    rules = [{**r, "confidence": 0.8} if r["name"] == "patch_fixes_disclosure" else r for r in base["rules"]]
    rules.append(
        {
            "name": "higher_source",
            "trigger": "patch_release",
            "target": "patch_release",
            "within": ["package", "cve_id"],
            "order": "level_then_later",
            "hierarchy": "source",
            "description": "A release from a higher source binds a lower one's.",
        }
    )
    return Policy.model_validate(
        {
            **base,
            "name": "security-advisory-generalised",
            "rules": rules,
            "hierarchies": {"source": {"levels": SOURCES, "field": "source_level"}},
        }
    )
