"""Mirrored dev suites: the free-form CVE and legal suites with the artefact of their
construction taken away.

Every free-form question of ``cvepatchqa-freeform`` asks about the one patched scope among
several disclosures written from the same template: the same package and attack type, only
the CVE id, severity, CWE, affected version and date differ, and the question names none of
those but (in 9 of 250) the version. A retriever that puts "the scope whose state changed"
first wins there without knowing which scope the question means. The mirrors give the other
scopes of the template a changed state too, so that guess stops paying; queries and gold
are unchanged (the question's own patch or overruling).

**Which scopes.** A question's *template group* is every scope holding a disclosure
(``cve_disclosed``) with its anchor disclosure's package and attack type ("… identified in
<package> … The flaw permits <attack> by …"), or, for ``legalprecedentqa-freeform``, every
scope holding a ruling (``ruling_issued``) with its anchor ruling's holding and doctrine
("… held that <holding>. … cases involving <doctrine>."): texts that differ from the anchor
only in parties, citation, year and court (the court is named by 23 of the 250 legal
questions). Its *other template scopes* are those minus its own. The candidates of a group
are its scopes that nothing voids yet (no patch, no overruling: T0 examples and distractors;
other T1 examples keep their own). ``all`` gives every candidate a voiding record; ``half``
a seeded sample of ``ceil(n / 2)`` of each group's ``n`` candidates (``half`` adds a subset
of ``all``'s records, the same ones). Per-question counts (min / median / max) are in the
manifest.

**The added records** are written like the suite's own, learnt from its voiding records and
the records they void (every one of which must match the frames below, or the script stops):
a patch note in the base suite's sentence frame with a kind and verb from those it uses and
a version in its range, naming neither product nor CVE; an overruling "Per curiam: The
<court>, sitting en banc, …" with the ruling's own court and the new standard the base suite
gives that holding. Each is dated after the latest voided record of its scope by a gap drawn
from the range of the suite's own gaps, carries an explicit ``supersedes`` edge to every
disclosure (ruling) of its scope, and gets an 8-hex-digit id like the suite's own (so no id
order tells it from them).

**Files.** ``<out>/<base>-mirror-{half,all}.corpus.jsonl``: the base corpus line for line,
then the added records in date order (so a store copied from the base suite's store and
extended ingests in the same order as one built from scratch), and ``<out>/manifest.json``
(counts, the rule, sha256 of every file read and written). The corpora are not committed;
``evals/mirrors/manifest.json`` is, so a rerun can be checked with ``git diff``.

    python evals/mirror_suites.py                  # writes evals/mirrors/ (seed 30)
    python evals/mirror_suites.py --out DIR --seed 30 --limit 20
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import re
import statistics
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from car_rag_evals.suites import MIRRORS, default_corpora_dir, default_mirrors_dir

DEFAULT_SEED = 30


@dataclass(frozen=True)
class Template:
    """How one base suite's voided records are read and its voiding records written."""

    base: str
    """Corpus stem in the corpora folder (``cvepatchqa``)."""
    queries: str
    """The free-form query set whose questions the mirror is about."""
    target_type: str
    voiding_type: str
    target: re.Pattern[str]
    """Reads a voided record's text; its named groups in ``group`` key the template group."""
    group: tuple[str, ...]
    voiding: re.Pattern[str]
    """Reads a voiding record's text: the base suite's frame, every one must match."""
    write: Callable[[Mapping[str, str], Learnt, random.Random], str]


@dataclass
class Learnt:
    """What the base suite's own voiding records show: their field values, the fields of the
    records they void beside them, and the gaps in days between the two."""

    values: dict[str, set[str]] = field(default_factory=dict)
    pairs: list[tuple[dict[str, str], dict[str, str]]] = field(default_factory=list)
    gaps: list[int] = field(default_factory=list)


PATCH = (
    "Release notice: The maintainer team has published version {version} as a {kind} update. This release {verb} "
    "recently disclosed security concerns raised by external researchers. All installations running prior versions "
    "should apply this update promptly. Detailed release notes are available in the project changelog."
)
OVERRULING = (
    "Per curiam: The {court}, sitting en banc, has reconsidered prior precedent in this area. The earlier approach is "
    "hereby expressly overruled and abrogated. Any reliance on the previously established test is disapproved. Lower "
    "courts should no longer apply the superseded doctrine. The updated governing standard is: {standard}."
)


def _frame(template: str, **groups: str) -> re.Pattern[str]:
    """A pattern matching exactly ``template`` with each field read by its group's pattern."""
    parts = re.split(r"\{(\w+)\}", template)
    return re.compile(
        "".join(f"(?P<{part}>{groups[part]})" if i % 2 else re.escape(part) for i, part in enumerate(parts)) + r"\Z"
    )


def _write_patch(_target: Mapping[str, str], learnt: Learnt, rng: random.Random) -> str:
    majors = [int(v.split(".")[0]) for v in learnt.values["version"]]
    version = f"{rng.randint(min(majors), max(majors))}.{rng.randint(0, 9)}"
    return PATCH.format(
        version=version, kind=rng.choice(sorted(learnt.values["kind"])), verb=rng.choice(sorted(learnt.values["verb"]))
    )


def _write_overruling(target: Mapping[str, str], learnt: Learnt, rng: random.Random) -> str:
    standards = sorted({v["standard"] for t, v in learnt.pairs if t["holding"] == target["holding"]})
    if not standards:
        raise ValueError(f"the base suite overrules no ruling holding that {target['holding']!r}: no standard to give it")
    return OVERRULING.format(court=target["court"], standard=rng.choice(standards))


TEMPLATES = {
    "cvepatchqa": Template(
        "cvepatchqa",
        "cvepatchqa-freeform",
        "cve_disclosed",
        "patch_released",
        re.compile(r"has been identified in (?P<package>\S+) \(maintained by [^)]*\)\. The flaw permits (?P<attack>.+?) by "),
        ("package", "attack"),
        _frame(PATCH, version=r"\d+\.\d", kind=r"\w+", verb=r"\w+"),
        _write_patch,
    ),
    "legalprecedentqa": Template(
        "legalprecedentqa",
        "legalprecedentqa-freeform",
        "ruling_issued",
        "ruling_overruled",
        re.compile(
            r"^In .+?, \d+ U\.S\. \d+ \(\d{4}\), the (?P<court>.+?) held that (?P<holding>.+?)\. This establishes "
            r"the controlling precedent for cases involving (?P<doctrine>.+?)\. "
        ),
        ("holding", "doctrine"),
        _frame(OVERRULING, court=r"[^,]+", standard=r".+"),
        _write_overruling,
    ),
}


def _fields(pattern: re.Pattern[str], record: Mapping[str, Any]) -> dict[str, str]:
    match = pattern.search(record["text"])
    if match is None:
        raise ValueError(f"record {record['doc_id']}: text does not match the suite's frame {pattern.pattern[:80]!r}…")
    return match.groupdict()


def _scope(record: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(record["scope"].items()))


def _date(record: Mapping[str, Any]) -> datetime:
    return datetime.fromisoformat(record["published_at"])


def learn(template: Template, records: list[dict[str, Any]]) -> Learnt:
    """Read every voiding record of the base suite and what it voids."""
    by_id = {r["doc_id"]: r for r in records}
    learnt = Learnt()
    for record in records:
        if record["doc_type"] != template.voiding_type:
            continue
        fields = _fields(template.voiding, record)
        for key, value in fields.items():
            learnt.values.setdefault(key, set()).add(value)
        for voided in record.get("supersedes", []):
            target = by_id[voided]
            learnt.pairs.append((_fields(template.target, target), fields))
            learnt.gaps.append((_date(record) - _date(target)).days)
    if not learnt.gaps:
        raise ValueError(f"{template.base}: no {template.voiding_type} record with a supersedes edge to learn from")
    return learnt


@dataclass
class Mirror:
    """The records a mirror adds (all of them, output order), which of them ``half`` keeps,
    and per question: its other template scopes, how many of them the base already voids,
    and how many each variant voids."""

    added: list[dict[str, Any]]
    half: set[str]
    per_question: dict[str, dict[str, int]]
    learnt: Learnt

    def variant(self, name: str) -> list[dict[str, Any]]:
        return [r for r in self.added if name == "all" or r["doc_id"] in self.half]


def mirror(template: Template, records: list[dict[str, Any]], queries: list[dict[str, Any]], seed: int) -> Mirror:
    """The voiding records ``all`` and ``half`` add for ``queries`` (see the module docstring)."""
    learnt = learn(template, records)
    by_id = {r["doc_id"]: r for r in records}
    scopes: dict[tuple, list[dict[str, Any]]] = {}
    for record in records:
        scopes.setdefault(_scope(record), []).append(record)
    voided = {s for s, members in scopes.items() if any(r["doc_type"] == template.voiding_type for r in members)}
    groups: dict[tuple[str, ...], list[tuple]] = {}  # group key -> its scopes, corpus order
    for record in records:
        if record["doc_type"] == template.target_type:
            key = tuple(_fields(template.target, record)[g] for g in template.group)
            if _scope(record) not in groups.setdefault(key, []):
                groups[key].append(_scope(record))
    asked: list[tuple[dict[str, Any], tuple, tuple[str, ...]]] = []
    for query in queries:
        anchor = by_id[query["anchor_doc_ids"][0]]
        key = tuple(_fields(template.target, anchor)[g] for g in template.group)
        asked.append((query, _scope(anchor), key))
    candidates = [s for key in dict.fromkeys(k for _, _, k in asked) for s in groups[key] if s not in voided]
    candidates = list(dict.fromkeys(candidates))  # a scope in two groups (two disclosures) gets one record
    records_rng = random.Random(f"{seed}:{template.base}:records")
    taken = set(by_id)
    written: dict[tuple, dict[str, Any]] = {}
    for scope in candidates:
        targets = [r for r in scopes[scope] if r["doc_type"] == template.target_type]
        latest = max(targets, key=_date)
        doc_id = f"{records_rng.getrandbits(32):08x}"
        while doc_id in taken:
            doc_id = f"{records_rng.getrandbits(32):08x}"
        taken.add(doc_id)
        when = _date(latest) + timedelta(days=records_rng.randint(min(learnt.gaps), max(learnt.gaps)))
        written[scope] = {
            "doc_id": doc_id,
            "text": template.write(_fields(template.target, latest), learnt, records_rng),
            "doc_type": template.voiding_type,
            "scope": dict(scope),
            "published_at": when.isoformat(),
            "supersedes": [r["doc_id"] for r in targets],
        }
    half_rng = random.Random(f"{seed}:{template.base}:half")
    half: set[tuple] = set()
    for key in dict.fromkeys(k for _, _, k in asked):
        pool = [s for s in groups[key] if s not in voided]
        half |= set(half_rng.sample(pool, (len(pool) + 1) // 2))
    per_question = {}
    for query, own, key in asked:
        others = [s for s in groups[key] if s != own]
        per_question[query["query_id"]] = {
            "other_scopes": len(others),
            "voided_in_base": sum(s in voided for s in others),
            "voided_half": sum(s in voided or s in half for s in others),
            "voided_all": sum(s in voided or s in written for s in others),
        }
    added = sorted(written.values(), key=lambda r: (r["published_at"], r["doc_id"]))
    return Mirror(added, {written[s]["doc_id"] for s in half}, per_question, learnt)


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _spread(values: list[int | float]) -> dict[str, float]:
    return {"min": min(values), "median": statistics.median(values), "max": max(values)}


def write_mirrors(corpora: Path, out: Path, seed: int = DEFAULT_SEED, limit: int | None = None) -> dict[str, Any]:
    """Write every mirror's corpus and ``manifest.json`` under ``out``; returns the manifest."""
    out.mkdir(parents=True, exist_ok=True)
    manifest: dict[str, Any] = {
        "command": f"python evals/mirror_suites.py --seed {seed}" + (f" --limit {limit}" if limit else ""),
        "seed": seed,
        "limit": limit,
        "rule": __doc__.split("**Which scopes.** ")[1].split("\n\n")[0].replace("\n", " "),
        "bases": {},
        "suites": {},
    }
    for base, template in TEMPLATES.items():
        corpus_path = corpora / f"{base}.corpus.jsonl"
        queries_path = corpora / f"{template.queries}.queries.jsonl"
        lines = corpus_path.read_text(encoding="utf-8").splitlines(keepends=True)
        records = [json.loads(line) for line in lines]
        queries = [json.loads(line) for line in queries_path.read_text(encoding="utf-8").splitlines() if line.strip()]
        made = mirror(template, records, queries[:limit], seed)
        counts = made.per_question.values()
        manifest["bases"][base] = {
            "corpus": corpus_path.name,
            "corpus_sha256": _sha256(corpus_path),
            "queries": queries_path.name,
            "queries_sha256": _sha256(queries_path),
            "questions": len(made.per_question),
            "group_by": list(template.group),
            "gap_days": [min(made.learnt.gaps), max(made.learnt.gaps)],
            "other_template_scopes": _spread([c["other_scopes"] for c in counts]),
            "already_voided_in_base": _spread([c["voided_in_base"] for c in counts]),
        }
        for name, spec in MIRRORS.items():
            if spec.base != base:
                continue
            added = made.variant(spec.variant)
            path = out / f"{spec.corpus}.corpus.jsonl"
            with path.open("w", encoding="utf-8") as handle:
                handle.writelines(lines)
                handle.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in added)
            manifest["suites"][name] = {
                "corpus": path.name,
                "sha256": _sha256(path),
                "queries": queries_path.name,
                "records": len(records) + len(added),
                "added": len(added),
                "share_of_other_scopes_voided": _spread(
                    [round(c[f"voided_{spec.variant}"] / c["other_scopes"], 3) for c in counts if c["other_scopes"]]
                ),
            }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    return manifest


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpora", type=Path, default=default_corpora_dir(), help="the public benchmark corpora")
    parser.add_argument("--out", type=Path, default=default_mirrors_dir())
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED)
    parser.add_argument("--limit", type=int, help="mirror only the first N free-form questions of each suite")
    args = parser.parse_args(argv)
    manifest = write_mirrors(args.corpora, args.out, args.seed, args.limit)
    for name, entry in manifest["suites"].items():
        print(f"{name}: {entry['records']} records ({entry['added']} added) -> {args.out / entry['corpus']}")


if __name__ == "__main__":
    main()
