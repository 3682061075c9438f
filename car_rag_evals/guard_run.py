"""``car-rag guard``: the authority guard over a file of answers, each judged against the
evidence it was generated from when that is known, else against car-rag's retrieval for its
query over the whole scopes of the result.

    car-rag guard --suite ghsa-freeform --answers answers.jsonl --evidence evidence.jsonl --out runs/guard
    car-rag guard --corpus c.jsonl --queries q.jsonl --policy p.toml --answers a.jsonl --out runs/guard

Answers: ``query_id``, ``condition``, ``answer`` (as ``eval-llm --answers`` takes them).

Evidence (``--evidence``), one JSON object per line: ``query_id``; ``condition`` (a line
without one serves every answer to that query that has no line of its own); and what the
reader saw, as ``records`` (doc ids, or record objects with ``doc_id`` as ``car-rag query
--format json --with-text`` prints them: their ``rank`` numbers them, their ``text`` counts
as seen), ``context_doc_ids`` (what ``eval-llm`` stores: an ``eval-llm`` ``answers.jsonl``
is itself an evidence file) or ``text`` (the rendered evidence). Optional: ``form``
(``documents``: cited ``[Document n]``, the plain form; ``packets``: ``[EP-n]``, the reader
and audit forms; default: the ``eval-llm`` condition's form, else what ``text`` cites, else
``documents``), ``dated`` (the documents were shown oldest first, as ``fresh-plain`` shows
them) and ``ambiguity`` (as ``car-rag query --format json`` writes it; null: the evidence
said the question names one scope; absent: the re-retrieval's).

Every query is retrieved once with the defaults (hybrid anchors, ``k1`` 10). An answer with
records in its evidence is judged against those records, with what replaces them in the
store's graph; with only rendered text, the text decides which versions are known and the
re-retrieval's whole scopes decide what holds; with no evidence, the whole scopes of the
re-retrieval's top ``k`` decide both (:mod:`car_rag.guard`).

Out: ``DIR/guard.jsonl`` (``query_id``, ``condition``, ``basis``, ``flagged``, ``judged``,
``findings``; plus the answer classifier's ``label`` on a built-in suite) and
``DIR/summary.md`` / ``summary.json``: per condition how many answers were flagged, by
finding kind and by classifier label; evidence lines that matched no answer are counted
there (and skipped).
"""

from __future__ import annotations

import collections
import dataclasses
import json
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from car_rag.ambiguity import Ambiguity, AmbiguousScope
from car_rag.eval.stats import Rate
from car_rag_evals.gold import load_gold
from car_rag_evals.llm.conditions import CONDITION_FORMS, RENAMED_CONDITIONS, condition_name
from car_rag_evals.llm.report import read_answers
from car_rag_evals.suites import custom_suite, load_suite, open_suite_store

__all__ = ["PACKET_CONDITIONS", "EvidenceLine", "read_evidence", "run_guard", "summarise_guard", "unmatched_lines"]

PACKET_CONDITIONS = frozenset(
    c for c in [*CONDITION_FORMS, *RENAMED_CONDITIONS] if CONDITION_FORMS[condition_name(c)] in ("reader", "audit")
)
"""``eval-llm`` conditions (and their former names) whose evidence numbers records ``[EP-n]``
and (but ``car-audit-omit``) shows the records they replace as provenance, beyond the
``context_doc_ids`` the run lists; the others (``dense``, ``car-plain``, ``fresh-plain``) show
plain ``[Document n]`` records, ``fresh-plain`` oldest first. ``closed-book`` lists none: the
reader saw nothing."""
DATED_CONDITIONS = frozenset({"fresh-plain"})
OMIT_CONDITIONS = frozenset({"car-audit-omit", "car-xml-omit"})
"""``eval-llm`` conditions that leave replaced records' texts out, listing only their packet ids."""
_FORMS = ("documents", "packets")


@dataclass(frozen=True)
class EvidenceLine:
    """One line of an evidence file: what the reader saw for a query (under one condition, or
    every condition when ``condition`` is None)."""

    line: int
    query_id: str
    condition: str | None
    doc_ids: tuple[str, ...] | None
    """Records shown, in the order given; None when only ``text`` is known."""
    numbers: tuple[int, ...] | None
    """Their numbers (ranks) where the evidence gives them."""
    text: str
    """The rendered evidence and any record texts given: versions in it count as seen."""
    form: str | None
    dated: bool
    ambiguity: Ambiguity | None
    states_ambiguity: bool
    """Whether the evidence said anything about ambiguity (``ambiguity`` present, even null)."""


def _fail(path: Path, number: int, message: str) -> ValueError:
    return ValueError(f"{path}:{number}: {message}")


def _ambiguity(value: Any, where: str) -> Ambiguity | None:
    """An ``ambiguity`` object as :meth:`Ambiguity.to_dict` writes it; ValueError names the field."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise ValueError(f"{where}: must be an object or null")
    scopes, states, members = value.get("scopes"), value.get("states"), value.get("members", [])
    if not isinstance(scopes, int) or isinstance(scopes, bool) or scopes < 2:
        raise ValueError(f"{where}.scopes: must be a whole number >= 2")
    if not isinstance(states, dict) or not all(
        isinstance(k, str) and isinstance(n, int) and not isinstance(n, bool) and n >= 0 for k, n in states.items()
    ):
        raise ValueError(f"{where}.states: must map state words to counts")
    if not isinstance(members, list):
        raise ValueError(f"{where}.members: must be a list")
    out = []
    for i, m in enumerate(members):
        at = f"{where}.members[{i}]"
        if not isinstance(m, dict) or not isinstance(m.get("scope"), dict) or not isinstance(m.get("state"), str):
            raise ValueError(f"{at}: needs 'scope' (an object) and 'state' (text)")
        probability, controlling = m.get("probability", 0.0), m.get("controlling", [])
        if not isinstance(probability, (int, float)) or isinstance(probability, bool):
            raise ValueError(f"{at}.probability: must be a number")
        if not isinstance(controlling, list) or not all(isinstance(d, str) for d in controlling):
            raise ValueError(f"{at}.controlling: must be a list of doc ids")
        out.append(
            AmbiguousScope({str(k): str(v) for k, v in m["scope"].items()}, float(probability), m["state"], tuple(controlling))
        )
    return Ambiguity(scopes, dict(states), tuple(out))


def _records(value: Any, path: Path, number: int, field: str) -> tuple[list[str], list[int] | None, list[str]]:
    """Doc ids, their ranks (when every record gives one) and their texts, from ``records``."""
    if not isinstance(value, list):
        raise _fail(path, number, f"'{field}' must be a list of doc ids or of record objects with 'doc_id'")
    ids: list[str] = []
    ranks: list[int] = []
    texts: list[str] = []
    for i, item in enumerate(value):
        if isinstance(item, str) and item:
            ids.append(item)
            continue
        if not isinstance(item, dict) or not isinstance(item.get("doc_id"), str) or not item["doc_id"]:
            raise _fail(path, number, f"{field}[{i}]: must be a doc id or a record object with 'doc_id'")
        ids.append(item["doc_id"])
        rank = item.get("rank")
        if rank is not None:
            if not isinstance(rank, int) or isinstance(rank, bool) or rank < 1:
                raise _fail(path, number, f"{field}[{i}].rank: must be a whole number >= 1")
            ranks.append(rank)
        if item.get("text") is not None:
            if not isinstance(item["text"], str):
                raise _fail(path, number, f"{field}[{i}].text: must be text")
            texts.append(item["text"])
    if ranks and len(ranks) != len(ids):
        raise _fail(path, number, f"'{field}': give 'rank' for every record or for none")
    return ids, ranks or None, texts


def read_evidence(path: Path) -> list[EvidenceLine]:
    """The evidence file (see the module docstring). Every problem is a ValueError naming
    the file, the line and the field; two lines for one query and condition are one too many."""
    if not path.is_file():
        raise FileNotFoundError(f"--evidence {path}: no such file")
    out: list[EvidenceLine] = []
    seen: dict[tuple[str, str | None], int] = {}
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise _fail(path, number, f"not JSON ({exc.msg}, column {exc.colno})") from None
        if not isinstance(row, dict):
            raise _fail(path, number, "must be a JSON object")
        qid, cond = row.get("query_id"), row.get("condition")
        if not isinstance(qid, str) or not qid:
            raise _fail(path, number, "missing field 'query_id' (text)")
        if cond is not None and not isinstance(cond, str):
            raise _fail(path, number, "'condition' must be text")
        if (qid, cond) in seen:
            raise _fail(
                path,
                number,
                f"a second evidence line for query {qid!r}"
                + (f", condition {cond!r}" if cond else "")
                + f" (first: line {seen[(qid, cond)]})",
            )
        seen[(qid, cond)] = number
        field = "records" if "records" in row else "context_doc_ids" if "context_doc_ids" in row else None
        text = row.get("text")
        if text is not None and not isinstance(text, str):
            raise _fail(path, number, "'text' must be the rendered evidence, as text")
        if field is None and text is None:
            raise _fail(path, number, "no evidence: give 'records', 'context_doc_ids' or 'text'")
        ids, numbers, texts = _records(row[field], path, number, field) if field else (None, None, [])
        form = row.get("form")
        if form is not None and form not in _FORMS:
            raise _fail(path, number, f"'form' must be one of {list(_FORMS)}, got {form!r}")
        dated = row.get("dated", False)
        if not isinstance(dated, bool):
            raise _fail(path, number, "'dated' must be true or false")
        try:
            ambiguity = _ambiguity(row.get("ambiguity"), "ambiguity")
        except ValueError as exc:
            raise _fail(path, number, str(exc)) from None
        out.append(
            EvidenceLine(
                number,
                qid,
                cond,
                tuple(ids) if ids is not None else None,
                tuple(numbers) if numbers else None,
                "\n\n".join([*texts, *([text] if text else [])]),
                form,
                dated,
                ambiguity,
                "ambiguity" in row,
            )
        )
    return out


def unmatched_lines(lines: Sequence[EvidenceLine], rows: Sequence[dict[str, Any]]) -> list[int]:
    """Line numbers of evidence no answer uses: its query (and condition, where it names one)
    has no answer. They are skipped, and the summary says how many."""
    asked = {(r["query_id"], r["condition"]) for r in rows}
    queries = {q for q, _ in asked}
    return [e.line for e in lines if ((e.query_id, e.condition) not in asked if e.condition else e.query_id not in queries)]


def _form(condition: str, evidence: EvidenceLine | None) -> str:
    """How the answer's evidence numbers its records (see the module docstring)."""
    if evidence is not None and evidence.form is not None:
        return evidence.form
    if condition in PACKET_CONDITIONS or (evidence is not None and "[EP-" in evidence.text and "[Document " not in evidence.text):
        return "packets"
    return "documents"


def summarise_guard(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Per condition: answers, judged, flagged (Wilson 95%), what they were judged against,
    findings by kind, and flagged answers by classifier label (when rows carry ``label``)."""
    out: dict[str, Any] = {}
    for cond in dict.fromkeys(r["condition"] for r in rows):
        sub = [r for r in rows if r["condition"] == cond]
        judged = [r for r in sub if r["judged"]]
        entry: dict[str, Any] = {
            "answers": len(sub),
            "judged": len(judged),
            "flagged": Rate(sum(r["flagged"] for r in judged), len(judged)).to_dict() if judged else None,
            "basis": dict(sorted(collections.Counter(r["basis"] for r in sub).items())),
            "findings": dict(sorted(collections.Counter(f["kind"] for r in judged for f in r["findings"]).items())),
        }
        if all("label" in r for r in sub):
            labels = collections.Counter(r["label"] for r in judged)
            flagged = collections.Counter(r["label"] for r in judged if r["flagged"])
            entry["by_label"] = {lab: {"answers": n, "flagged": flagged[lab]} for lab, n in sorted(labels.items())}
        out[cond] = entry
    return out


def _markdown(summary: dict[str, Any], command: str) -> str:
    lines = [
        f"# Authority guard: {summary['suite']}",
        "",
        f"Generated by `{command}` on {summary['generated']}. Each answer judged by `car_rag.guard.check_answer`: "
        "against the evidence it was generated from where the evidence file gives it (basis `evidence`), else "
        "against car-rag's default retrieval for its query over the whole scopes of its top "
        f"{summary['k']} (basis `scopes`).",
        "",
        "| condition | answers | judged | basis | flagged | findings |",
        "|---|---|---|---|---|---|",
    ]
    for cond, e in summary["conditions"].items():
        rate = e["flagged"]
        flagged = (
            "–"
            if rate is None
            else f"{rate['successes']} ({rate['value']:.1%}, 95% CI {rate['ci95'][0]:.1%}–{rate['ci95'][1]:.1%})"
        )
        findings = ", ".join(f"{k} {v}" for k, v in e["findings"].items()) or "–"
        basis = ", ".join(f"{k} {v}" for k, v in e["basis"].items())
        lines.append(f"| {cond} | {e['answers']} | {e['judged']} | {basis} | {flagged} | {findings} |")
    if any("by_label" in e for e in summary["conditions"].values()):
        lines += [
            "",
            "Flagged answers by the answer classifier's label:",
            "",
            "| condition | label | answers | flagged |",
            "|---|---|---|---|",
        ]
        for cond, e in summary["conditions"].items():
            for lab, c in e.get("by_label", {}).items():
                lines.append(f"| {cond} | {lab} | {c['answers']} | {c['flagged']} |")
    skipped = summary.get("evidence_skipped")
    if skipped:
        lines += [
            "",
            f"{skipped['lines']} evidence line(s) matched no answer and were skipped "
            f"(lines {', '.join(map(str, skipped['first']))}{' …' if skipped['lines'] > len(skipped['first']) else ''}).",
        ]
    return "\n".join(lines) + "\n"


def run_guard(
    answers: Path,
    out_dir: Path,
    *,
    suite_name: str | None = None,
    corpus: Path | None = None,
    queries: Path | None = None,
    policy: str | None = None,
    corpora_dir: Path | None = None,
    stores_dir: Path = Path(".car-stores"),
    k: int = 5,
    evidence: Path | None = None,
    command: str = "car-rag guard ...",
    progress: bool = True,
) -> list[Path]:
    """The ``guard`` command (see the module docstring)."""
    from tqdm.auto import tqdm

    from car_rag.eval.answers import classify
    from car_rag.evidence.plain import oldest_first
    from car_rag.guard import Numbering, check_answer, scope_evidence, seen_evidence
    from car_rag.queries import load_queries
    from car_rag.retriever import ControllingAuthorityRetriever

    if suite_name is not None:
        suite = load_suite(suite_name, corpora_dir)
    elif corpus and queries and policy:
        suite = custom_suite(corpus, queries, policy)
    else:
        raise ValueError("give --suite NAME, or --corpus, --queries and --policy")
    rows = read_answers(answers)
    lines = read_evidence(evidence) if evidence is not None else []
    texts = {q.query_id: q.query for q in load_queries(suite.queries)}
    unknown = sorted({r["query_id"] for r in rows} - set(texts))
    if unknown:
        raise ValueError(f"{answers}: {len(unknown)} query ids are not in {suite.queries}, first: {unknown[:3]}")
    by_key = {(e.query_id, e.condition): e for e in lines}
    unused = unmatched_lines(lines, rows)
    if unused:
        print(
            f"car-rag guard: {len(unused)} evidence line(s) of {evidence} match no answer and are skipped "
            f"(first: line {unused[0]})",
            file=sys.stderr,
        )
    gold = load_gold(suite) if suite_name is not None else {}
    store = open_suite_store(suite, stores_dir, progress)
    retriever = ControllingAuthorityRetriever(store)
    results = {}
    qids = list(dict.fromkeys(r["query_id"] for r in rows))
    for qid in tqdm(qids, desc="retrieve", unit="query", disable=None if progress else True):
        results[qid] = retriever.retrieve(texts[qid])
    out_rows = []
    for r in rows:
        qid, cond = r["query_id"], r["condition"]
        line = by_key.get((qid, cond)) or by_key.get((qid, None))
        form = cast("Numbering", _form(cond, line))
        result = results[qid]
        ambiguity = line.ambiguity if line is not None and line.states_ambiguity else result.ambiguity
        if line is None or line.doc_ids is None:
            basis = scope_evidence(result, store.graph, store.policy, k=k, form=form, text=line.text if line else None)
            basis = dataclasses.replace(basis, ambiguity=ambiguity)
        else:
            ids = list(line.doc_ids)
            if line.numbers is None and (line.dated or cond in DATED_CONDITIONS) and all(d in store.records for d in ids):
                ids = [rec.doc_id for rec in oldest_first(store.records[d] for d in ids)]
            try:
                basis = seen_evidence(
                    store.graph,
                    ids,
                    store.policy,
                    form=form,
                    numbers=line.numbers,
                    text=line.text,
                    ambiguity=ambiguity,
                    provenance=form == "packets" and cond not in OMIT_CONDITIONS,
                    unnumbered=True if cond in OMIT_CONDITIONS else None,
                    subject=result,
                    query=texts[qid],
                )
            except ValueError as exc:
                raise ValueError(f"{evidence}:{line.line}: {exc}") from None
        report = check_answer(r["answer"], basis, store.policy)
        row = {"query_id": qid, "condition": cond, **report.to_dict()}
        if qid in gold:
            row["label"] = classify(r["answer"], suite.name, gold[qid]).label
        out_rows.append(row)
    out_dir.mkdir(parents=True, exist_ok=True)
    jsonl = out_dir / "guard.jsonl"
    jsonl.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in out_rows), encoding="utf-8")
    summary: dict[str, Any] = {
        "suite": suite.name,
        "command": command,
        "generated": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "k": k,
        "conditions": summarise_guard(out_rows),
    }
    if unused:
        summary["evidence_skipped"] = {"lines": len(unused), "first": unused[:10]}
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    (out_dir / "summary.md").write_text(_markdown(summary, command))
    return [jsonl, out_dir / "summary.json", out_dir / "summary.md"]
