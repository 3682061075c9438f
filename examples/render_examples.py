"""Render the evidence car-rag hands to a model, once for every built-in policy, in both forms.

For each policy a small store is built in a temporary folder from a handful of
hand-written records. In every one the record that controls shares almost no vocabulary
with the question (a recall notice that never repeats the label's dosing, a release note
that never names the CVE, an en banc opinion that never restates the panel's holding), so
only authority resolution can bring it in. The retrieval runs with BM25 anchors; the
reader-first form (``render_reader``) and the audit XML
(``render_audit``) are written to ``examples/rendered/<policy>.md``.

Run:  python examples/render_examples.py [--out examples/rendered]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from car_rag import CARStore, ControllingAuthorityRetriever, builtin_policies, load_policy  # noqa: E402
from car_rag.eligibility import CallerContext  # noqa: E402
from car_rag.evidence import render_audit, render_reader  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


@dataclass
class Example:
    query: str
    controlling: str
    """The record that must come out active although the query does not match it."""
    stale: str = ""
    """The record the query matches, which must come out superseded (empty: none)."""
    caller: CallerContext | None = None
    title: str = ""
    disputed: str = ""
    """A record that must come out active with its authority disputed (multi-authority)."""


@dataclass
class Scenario:
    records: list[dict[str, Any]]
    examples: list[Example] = field(default_factory=list)


SCENARIOS: dict[str, Scenario] = {
    "drug-regulation": Scenario(
        records=[
            {
                "doc_id": "label-glucorex-er-2021",
                "text": "GLUCOREX XR (metformin hydrochloride) extended-release tablets, 500 mg. Indicated as an "
                "adjunct to diet and exercise to improve glycemic control in adults with type 2 diabetes. "
                "Recommended starting dose: 500 mg once daily with the evening meal; increase by 500 mg weekly.",
                "doc_type": "drug_label",
                "scope": {"ndc": "0093-7180-01"},
                "published_at": "2021-03-15",
                "source": "DailyMed",
                "authority": 0.9,
            },
            {
                "doc_id": "recall-2024-0412",
                "text": "Class II enforcement action. Lots 4F221 through 4F239 are being withdrawn from wholesale "
                "and retail channels after stability testing found N-nitrosodimethylamine above the acceptable "
                "intake limit. Firm-initiated; distribution nationwide; consignees notified by letter.",
                "doc_type": "recall_enforcement",
                "scope": {"ndc": "0093-7180-01"},
                "published_at": "2024-04-12",
                "source": "FDA Enforcement Report",
                "authority": 1.0,
            },
            {
                "doc_id": "label-cardiovel-2019",
                "text": "CARDIOVEL (lisinopril) tablets. Indicated for hypertension. Recommended starting dose: "
                "10 mg once daily.",
                "doc_type": "drug_label",
                "scope": {"ndc": "68180-513-01"},
                "published_at": "2019-06-01",
                "source": "DailyMed",
                "authority": 0.9,
            },
            {
                "doc_id": "label-cardiovel-2023",
                "text": "CARDIOVEL (lisinopril) tablets, revised. Boxed warning on fetal toxicity added; "
                "angioedema precautions expanded.",
                "doc_type": "drug_label",
                "scope": {"ndc": "68180-513-01"},
                "published_at": "2023-02-10",
                "source": "DailyMed",
                "authority": 0.9,
            },
            {
                "doc_id": "label-somnara-2022",
                "text": "SOMNARA (zolpidem tartrate) tablets. Short-term treatment of insomnia. Recommended dose "
                "for women: 5 mg immediately before bedtime.",
                "doc_type": "drug_label",
                "scope": {"ndc": "0054-0100-25"},
                "published_at": "2022-08-01",
            },
            {
                "doc_id": "recall-somnara-class-i-2024",
                "text": "Class I recall: SOMNARA 10 mg tablets, lot 4471, found to contain 20 mg of zolpidem per "
                "tablet. Stop dispensing and return all units.",
                "doc_type": "recall_enforcement",
                "scope": {"ndc": "0054-0100-25"},
                "published_at": "2024-02-05",
                "source": "FDA Enforcement Report",
                "metadata": {"recall_class": "I"},
            },
            {
                "doc_id": "recall-somnara-class-iii-2024",
                "text": "Class III recall: SOMNARA tablets, carton label misprint of the storage temperature. "
                "Units may continue to be dispensed.",
                "doc_type": "recall_enforcement",
                "scope": {"ndc": "0054-0100-25"},
                "published_at": "2024-05-20",
                "source": "FDA Enforcement Report",
                "metadata": {"recall_class": "III"},
            },
        ],
        examples=[
            Example(
                "What is the recommended starting dose of metformin extended-release tablets for type 2 diabetes?",
                controlling="recall-2024-0412",
                stale="label-glucorex-er-2021",
            ),
            Example(
                "May SOMNARA tablets continue to be dispensed after the carton label misprint?",
                controlling="recall-somnara-class-i-2024",
                stale="recall-somnara-class-iii-2024",
                title="Recall classes: a later class III recall does not lift a class I recall",
            ),
        ],
    ),
    "legal-precedent": Scenario(
        records=[
            {
                "doc_id": "harlan-v-mercer-2014",
                "text": "Harlan v. Mercer, 611 F.3d 204. Officers who used a taser on a passively resisting "
                "suspect are entitled to qualified immunity because no precedent clearly established that the "
                "force was excessive.",
                "doc_type": "ruling",
                "scope": {"case": "harlan_v_mercer", "question_id": "Q-qualified-immunity"},
                "published_at": "2014-05-02",
                "source": "8th Cir.",
            },
            {
                "doc_id": "ca8-en-banc-2022",
                "text": "On rehearing en banc we hold that a general constitutional rule already identified in the "
                "decisional law may apply with obvious clarity to the conduct at issue. To the extent earlier "
                "panel decisions required a factually identical case, they are abrogated.",
                "doc_type": "overruling",
                "scope": {"case": "harlan_v_mercer", "question_id": "Q-qualified-immunity"},
                "published_at": "2022-09-14",
                "source": "8th Cir. (en banc)",
            },
            {
                "doc_id": "castellano-v-ruiz-2017",
                "text": "Castellano v. Ruiz. Qualified immunity denied where the officer shot an unarmed, fleeing "
                "suspect; the right was clearly established.",
                "doc_type": "ruling",
                "scope": {"case": "castellano_v_ruiz", "question_id": "Q-qualified-immunity"},
                "published_at": "2017-11-20",
            },
            {
                "doc_id": "pemberton-v-larkspur-2015",
                "text": "Pemberton v. Larkspur Press. Parody of a novel is fair use where it comments on the work.",
                "doc_type": "ruling",
                "scope": {"case": "pemberton_v_larkspur", "question_id": "Q-fair-use"},
                "published_at": "2015-03-03",
                "source": "U.S. Supreme Court",
                "metadata": {"court_level": "supreme"},
            },
            {
                "doc_id": "pemberton-remand-2019",
                "text": "On remand the district court declines to follow the earlier holding and finds that the "
                "commentary defence does not reach a sequel sold as a substitute for the original.",
                "doc_type": "overruling",
                "scope": {"case": "pemberton_v_larkspur", "question_id": "Q-fair-use"},
                "published_at": "2019-06-11",
                "source": "S.D.N.Y.",
                "metadata": {"court_level": "district"},
            },
        ],
        examples=[
            Example(
                "Are officers who taser a passively resisting suspect entitled to qualified immunity under Harlan v. Mercer?",
                controlling="ca8-en-banc-2022",
                stale="harlan-v-mercer-2014",
            ),
            Example(
                "Is parody of a novel fair use under Pemberton v. Larkspur Press?",
                controlling="pemberton-v-larkspur-2015",
                disputed="pemberton-remand-2019",
                title="Disputed authority: a later district decision against a Supreme Court ruling",
            ),
        ],
    ),
    "sec-204a1": Scenario(
        records=[
            {
                "doc_id": "preclear-e123-acme",
                "text": "Pre-clearance approved: employee E123 may buy up to 500 shares of ACME common stock "
                "within five trading days.",
                "doc_type": "pre_clearance_approved",
                "scope": {"employee": "E123", "ticker": "ACME"},
                "published_at": "2025-03-03T09:00:00Z",
                "source": "compliance desk",
            },
            {
                "doc_id": "blackout-acme-q1",
                "text": "Trading window closed for all access persons pending the quarterly earnings release. No "
                "transactions until two business days after publication.",
                "doc_type": "blackout_announced",
                "scope": {"ticker": "ACME"},
                "published_at": "2025-03-04T17:30:00Z",
                "source": "chief compliance officer",
            },
            {
                "doc_id": "preclear-e456-globex",
                "text": "Pre-clearance approved: employee E456 may sell 200 shares of GLOBEX common stock.",
                "doc_type": "pre_clearance_approved",
                "scope": {"employee": "E456", "ticker": "GLOBEX"},
                "published_at": "2025-03-03T10:00:00Z",
            },
            {
                "doc_id": "conflict-e123",
                "text": "Employee E123 discloses a board seat at a supplier of ACME.",
                "doc_type": "conflict_disclosed",
                "scope": {"employee": "E123"},
                "published_at": "2025-01-10T12:00:00Z",
            },
            {
                "doc_id": "ack-e123-2025",
                "text": "Employee E123 acknowledged the code of ethics, edition 2025.",
                "doc_type": "policy_acknowledged",
                "scope": {"employee": "E123"},
                "published_at": "2025-01-02T12:00:00Z",
            },
            {
                "doc_id": "blackout-initech-e789",
                "text": "Notice to E789: as a member of the deal team you may not trade INITECH securities until "
                "the merger is announced.",
                "doc_type": "blackout_announced",
                "scope": {"employee": "E789", "ticker": "INITECH"},
                "published_at": "2025-04-01T09:00:00Z",
                "source": "chief compliance officer",
            },
            {
                "doc_id": "exception-e789-initech",
                "text": "Hardship exception: E789 may sell up to 2,000 INITECH shares to meet a court-ordered "
                "settlement, through the firm's desk only.",
                "doc_type": "trading_exception_granted",
                "scope": {"employee": "E789", "ticker": "INITECH"},
                "published_at": "2025-04-10T14:00:00Z",
                "source": "chief compliance officer",
            },
            {
                "doc_id": "revocation-e789-initech",
                "text": "The settlement was paid from other funds; the permission given to E789 on 10 April is "
                "withdrawn with immediate effect.",
                "doc_type": "trading_exception_revoked",
                "scope": {"employee": "E789", "ticker": "INITECH"},
                "published_at": "2025-04-15T08:00:00Z",
                "source": "chief compliance officer",
            },
        ],
        examples=[
            Example(
                "Is employee E123 cleared to buy ACME shares this week?",
                controlling="blackout-acme-q1",
                stale="preclear-e123-acme",
            ),
            Example(
                "May E789 sell INITECH shares under the hardship exception for the court-ordered settlement?",
                controlling="revocation-e789-initech",
                stale="exception-e789-initech",
                title="Exception revoked: the hardship exception lapsed, so the deal-team blackout controls again",
            ),
        ],
    ),
    "security-advisory": Scenario(
        records=[
            {
                "doc_id": "lodash-cve-2019-10744",
                "text": "CVE-2019-10744: Prototype pollution in lodash defaultsDeep. Versions of lodash before the "
                "fixed release let an attacker who controls the source object add or modify properties of "
                "Object.prototype through a constructor payload. Severity: critical.",
                "doc_type": "vulnerability_disclosure",
                "scope": {"package": "lodash", "cve_id": "CVE-2019-10744"},
                "published_at": "2019-07-01",
                "source": "NVD",
                "authority": 0.85,
                "uri": "https://nvd.nist.gov/vuln/detail/CVE-2019-10744",
            },
            {
                "doc_id": "lodash-4.17.12",
                "text": "Release 4.17.12. Bumped dev dependencies and refreshed the build toolchain. Nested sources "
                "are no longer walked through constructor keys when assigning. Sped up isEqual for typed arrays.",
                "doc_type": "patch_release",
                "scope": {"package": "lodash", "cve_id": "CVE-2019-10744"},
                "published_at": "2019-07-09",
                "version": "4.17.12",
                "source": "project release notes",
                "authority": 0.9,
                "uri": "https://github.com/lodash/lodash/releases/tag/4.17.12",
            },
            {
                "doc_id": "axios-cve-2099-10003",
                "text": "CVE-2099-10003: Server-side request forgery in axios when a protocol-relative URL is "
                "combined with baseURL; credentials and internal headers leak to an arbitrary host.",
                "doc_type": "vulnerability_disclosure",
                "scope": {"package": "axios", "cve_id": "CVE-2099-10003"},
                "published_at": "2024-05-01",
                "source": "GitHub Advisory Database",
            },
            {
                "doc_id": "axios-1.7.4-internal",
                "text": "Internal build 1.7.4: absolute-path handling hardened in the request adapter.",
                "doc_type": "patch_release",
                "scope": {"package": "axios", "cve_id": "CVE-2099-10003"},
                "published_at": "2024-05-20",
                "version": "1.7.4",
                "tenant": "acme",
                "allowed_principals": ["security-team"],
            },
            {
                "doc_id": "minimist-cve-2021-44906",
                "text": "CVE-2021-44906: Prototype pollution in minimist argument parsing via constructor keys.",
                "doc_type": "vulnerability_disclosure",
                "scope": {"package": "minimist", "cve_id": "CVE-2021-44906"},
                "published_at": "2022-03-17",
            },
        ],
        examples=[
            Example(
                "Is the lodash prototype pollution in defaultsDeep still unpatched?",
                controlling="lodash-4.17.12",
                stale="lodash-cve-2019-10744",
                title="Unrestricted reader",
            ),
            Example(
                "Can axios be tricked into server-side request forgery with a protocol-relative URL?",
                controlling="",
                stale="axios-cve-2099-10003",
                caller=CallerContext(tenant="globex", principals={"analyst"}),
                title="A reader who may not see the patch (hidden superseder)",
            ),
        ],
    ),
    "versioned-document": Scenario(
        records=[
            {
                "doc_id": "travel-policy-v1",
                "text": "Travel policy 1.0, section 4: employees may book business class on any flight longer than six hours.",
                "doc_type": "policy_document",
                "scope": {"document": "travel-policy"},
                "published_at": "2021-01-01",
                "version": "1.0",
            },
            {
                "doc_id": "travel-policy-v2",
                "text": "Travel policy 2.0, section 4 (cabins): premium seating requires written vice-president "
                "approval; otherwise economy applies regardless of duration.",
                "doc_type": "policy_document",
                "scope": {"document": "travel-policy"},
                "published_at": "2024-01-01",
                "version": "2.0",
            },
            {
                "doc_id": "expense-policy-v3",
                "text": "Expense policy 3.0: meals on long flights are reimbursed up to 40 EUR per day.",
                "doc_type": "policy_document",
                "scope": {"document": "expense-policy"},
                "published_at": "2023-06-01",
                "version": "3.0",
            },
            {
                "doc_id": "security-standard-v1.2",
                "text": "Security standard 1.2: laptops must be encrypted before any business flight.",
                "doc_type": "standard",
                "scope": {"document": "security-standard"},
                "published_at": "2022-02-01",
                "version": "1.2",
            },
        ],
        examples=[
            Example(
                "Can I book business class on a flight longer than six hours?",
                controlling="travel-policy-v2",
                stale="travel-policy-v1",
            )
        ],
    ),
}


def render_policy(name: str, scenario: Scenario, folder: Path) -> tuple[str, list[str]]:
    """Markdown for one policy, and the problems found (expected statuses not met)."""
    policy = load_policy(name)
    store = CARStore.open(folder, policy)
    report = store.ingest(scenario.records, progress=False)
    if report.errors:
        raise SystemExit(f"{name}: records rejected: {[str(e) for e in report.errors]}")
    retriever = ControllingAuthorityRetriever(store, anchors="bm25")
    problems: list[str] = []
    lines = [
        f"# `{name}`",
        "",
        policy.description.strip(),
        "",
        f"Store: {len(store)} hand-written records; rules: "
        + ", ".join(f"`{r.name}` ({r.label()} within {', '.join(r.within) or 'all scopes'})" for r in policy.rules)
        + ".",
        "",
        "Generated by `python examples/render_examples.py` "
        "(`ControllingAuthorityRetriever(store, anchors='bm25')`; reader-first form "
        "`render_reader(result, policy=store.policy)`, audit form `render_audit(result, policy=store.policy)`).",
    ]
    for example in scenario.examples:
        result = retriever.retrieve(example.query, caller=example.caller)
        xml = render_audit(result, policy=store.policy)
        status = {r.doc_id: r.status for r in result}
        if example.controlling and status.get(example.controlling) != "active":
            problems.append(f"{name}: {example.controlling} is {status.get(example.controlling, 'missing')}, expected active")
        if example.stale and status.get(example.stale) != "superseded":
            problems.append(f"{name}: {example.stale} is {status.get(example.stale, 'missing')}, expected superseded")
        item = result.get(example.disputed) if example.disputed else None
        if example.disputed and (item is None or item.status != "active" or not item.disputed_by):
            problems.append(f"{name}: {example.disputed} is not active and disputed")
        lines += ["", f"## {example.title}" if example.title else "## Query", ""]
        if example.title:
            lines += ["**Query**", ""]
        lines += [f"> {example.query}", ""]
        if example.caller is not None:
            principals = ", ".join(sorted(example.caller.principals)) or "none"
            lines += [f"Caller: tenant `{example.caller.tenant}`, principals {principals}.", ""]
        ranking = ", ".join(f"{r.rank}. `{r.doc_id}` ({r.status})" for r in result)
        reader = render_reader(result, policy=store.policy)
        lines += [
            f"Ranking: {ranking}.",
            "",
            "Reader-first form (`--format reader`; the default for a model is plain documents, see the README):",
            "",
            "```xml",
            reader,
            "```",
            "",
            "Audit form:",
            "",
            "```xml",
            xml,
            "```",
        ]
    store.close()
    return "\n".join(lines) + "\n", problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=ROOT / "examples" / "rendered")
    args = parser.parse_args()
    missing = sorted(set(builtin_policies()) - set(SCENARIOS))
    if missing:
        print(f"no example scenario for built-in policies {missing}", file=sys.stderr)
        return 1
    args.out.mkdir(parents=True, exist_ok=True)
    all_problems: list[str] = []
    for name in builtin_policies():
        folder = Path(tempfile.mkdtemp(prefix=f"car-example-{name}-"))
        try:
            markdown, problems = render_policy(name, SCENARIOS[name], folder)
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        path = args.out / f"{name}.md"
        path.write_text(markdown, encoding="utf-8")
        all_problems += problems
        print(f"wrote {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}" + (" (PROBLEMS)" if problems else ""))
    for problem in all_problems:
        print(problem, file=sys.stderr)
    return 1 if all_problems else 0


if __name__ == "__main__":
    sys.exit(main())
