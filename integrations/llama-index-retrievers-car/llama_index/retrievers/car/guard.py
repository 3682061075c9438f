"""The authority guard as a response check for a query engine.

    response = engine.query("Is yamlette still vulnerable?")
    report = check_response(response, policy)       # also stored in response.metadata["car_guard"]
    if report.flagged:
        print([f.message for f in report.findings])

The response's source nodes are turned into the car-rag result they describe
(:func:`nodes_to_result`, the same packet ids :class:`EvidenceSynthesizer` gave them) and
the answer is judged by :func:`car_rag.guard.check_answer`; nothing is re-implemented here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from car_rag import Policy, load_policy
from car_rag.evidence import EvidenceForm
from car_rag.guard import GuardReport, check_answer

from llama_index.retrievers.car.layout import MetadataLayout
from llama_index.retrievers.car.resolver import nodes_to_result

__all__ = ["CAR_GUARD", "check_response"]

CAR_GUARD = "car_guard"
"""Key of the guard's report in ``response.metadata``."""


def check_response(
    response: Any,
    policy: Policy | str | Path,
    *,
    layout: MetadataLayout | None = None,
    k: int | None = None,
    query: str = "",
    form: EvidenceForm = "plain",
) -> GuardReport:
    """The guard's verdict on a query engine's ``response`` (its text and ``source_nodes``),
    under the policy the nodes were resolved with, reading citations as the evidence ``form``
    numbers them (``EvidenceSynthesizer``'s default, plain: ``[Document n]``); stored in
    ``response.metadata["car_guard"]`` when the response has metadata. A response it cannot
    judge (no text, no nodes) says why."""
    nodes = list(getattr(response, "source_nodes", None) or [])
    text = getattr(response, "response", None)
    if text is None and not hasattr(response, "response"):
        text = response if isinstance(response, (str, bytes)) else None
    policy = load_policy(policy)
    result = nodes_to_result(query, nodes, policy, layout)
    report = check_answer(text, result, policy, k=k, form=form)
    if hasattr(response, "metadata"):
        response.metadata = {**(response.metadata or {}), CAR_GUARD: report}
    return report
