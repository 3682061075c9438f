"""Retrieval results built without a model or a vector store: an authority graph over
hand-written records and Stage-1 anchors given by hand (fast unit tests)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from car_rag.channels import FusedHit
from car_rag.eligibility import CallerContext
from car_rag.graph import AuthorityGraph
from car_rag.policy import Policy, load_policy
from car_rag.records import Record
from car_rag.resolution import RetrievalResult, resolve_authority


def authority_result(
    policy: Policy | str,
    records: Sequence[dict[str, Any]],
    anchors: Sequence[str],
    query: str = "q",
    caller: CallerContext | None = None,
) -> tuple[RetrievalResult, Policy]:
    """Resolve ``anchors`` (doc ids, best first) over a graph of ``records`` under ``policy``."""
    policy = load_policy(policy)
    graph = AuthorityGraph(policy)
    for rec in records:
        graph.add(Record.model_validate(rec))
    hits = [FusedHit(doc_id=d, score=1.0 / (i + 1), rank=i + 1) for i, d in enumerate(anchors)]
    return resolve_authority(graph, policy, query, hits, caller), policy


SCENARIOS: dict[str, dict[str, Any]] = {
    # policy: records (the stale one first), the anchors, and what the digest must say
    "security-advisory": {
        "records": [
            {
                "doc_id": "lodash-cve",
                "text": "CVE-2019-10744: prototype pollution in lodash defaultsDeep. No patch yet.",
                "doc_type": "vulnerability_disclosure",
                "scope": {"package": "lodash", "cve_id": "CVE-2019-10744"},
                "published_at": "2019-07-01",
            },
            {
                "doc_id": "lodash-4.17.12",
                "text": "Release 4.17.12. Nested sources are no longer walked through constructor keys.",
                "doc_type": "patch_release",
                "version": "4.17.12",
                "scope": {"package": "lodash", "cve_id": "CVE-2019-10744"},
                "published_at": "2019-07-09",
            },
            {
                "doc_id": "minimist-cve",
                "text": "CVE-2021-44906: prototype pollution in minimist.",
                "doc_type": "vulnerability_disclosure",
                "scope": {"package": "minimist", "cve_id": "CVE-2021-44906"},
                "published_at": "2022-03-17",
            },
        ],
        "anchors": ["lodash-cve", "minimist-cve"],
        "digest": [
            "lodash, CVE-2019-10744: patched. The patch release 4.17.12 fixes the vulnerability disclosure. "
            "(Current: EP-1. Replaced: EP-3.)",
            "minimist, CVE-2021-44906: vulnerable. (Current: EP-2.)",
        ],
    },
    "legal-precedent": {
        "records": [
            {
                "doc_id": "smith-1990",
                "text": "Smith v. Jones (1990): the exclusionary rule applies to civil forfeiture.",
                "doc_type": "ruling",
                "scope": {"case": "smith_v_jones", "question_id": "Q1"},
                "published_at": "1990-05-01",
            },
            {
                "doc_id": "doe-2020",
                "text": "En banc: the earlier approach is expressly overruled.",
                "doc_type": "overruling",
                "scope": {"case": "smith_v_jones", "question_id": "Q1"},
                "published_at": "2020-02-03",
            },
        ],
        "anchors": ["smith-1990"],
        "digest": ["smith_v_jones, Q1: overruled. The overruling overrules the ruling. (Current: EP-1. Replaced: EP-2.)"],
    },
    "drug-regulation": {
        "records": [
            {
                "doc_id": "label-2021",
                "text": "GLUCOREX XR tablets, indicated for type 2 diabetes.",
                "doc_type": "drug_label",
                "scope": {"ndc": "0093-7180-01"},
                "published_at": "2021-03-15",
            },
            {
                "doc_id": "recall-2024",
                "text": "Class II enforcement action: lots withdrawn after NDMA testing.",
                "doc_type": "recall_enforcement",
                "scope": {"ndc": "0093-7180-01"},
                "published_at": "2024-04-12",
            },
        ],
        "anchors": ["label-2021"],
        "digest": ["0093-7180-01: recalled. The recall enforcement withdraws the drug label. (Current: EP-1. Replaced: EP-2.)"],
    },
    "sec-204a1": {
        "records": [
            {
                "doc_id": "pc-1",
                "text": "Pre-clearance approved for J. Doe to buy 100 ACME.",
                "doc_type": "pre_clearance_approved",
                "scope": {"employee": "jdoe", "ticker": "ACME"},
                "published_at": "2024-03-01",
            },
            {
                "doc_id": "bo-1",
                "text": "Blackout announced on ACME ahead of earnings.",
                "doc_type": "blackout_announced",
                "scope": {"ticker": "ACME"},
                "published_at": "2024-03-02",
            },
        ],
        "anchors": ["pc-1"],
        "digest": [
            "ACME: not compliant. The blackout announced voids the pre clearance approved. (Current: EP-1. Replaced: EP-2.)"
        ],
    },
    "versioned-document": {
        "records": [
            {
                "doc_id": "sop-7-v1",
                "text": "SOP-7 version 1: gowning steps.",
                "doc_type": "sop",
                "version": "1",
                "scope": {"document": "SOP-7"},
            },
            {
                "doc_id": "sop-7-v2",
                "text": "SOP-7 version 2: gowning steps, revised.",
                "doc_type": "sop",
                "version": "2",
                "scope": {"document": "SOP-7"},
            },
        ],
        "anchors": ["sop-7-v1"],
        "digest": ["SOP-7: the sop 2 is current; it replaces the sop 1. (Current: EP-1. Replaced: EP-2.)"],
    },
}
