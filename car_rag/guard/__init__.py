"""The authority-consistency guard: does an answer agree with the authority behind the
evidence it was given?

The guard judges an answer against :class:`GuardEvidence`: the records the reader saw,
numbered as it saw them, plus what the guard adds from the store's authority graph. Build
it with :func:`seen_evidence` when the evidence an answer was generated from is known (its
records, or its rendered text), and with :func:`scope_evidence` when it is not: then the
guard re-retrieves and judges over the *whole scopes* of the result's top ``k`` records,
not only the ``k`` records themselves. A :class:`~car_rag.retriever.RetrievalResult` or a
list of packets passed to :func:`check_answer` is taken as what the reader saw.

Findings:

``stale_state``        the answer asserts the state of a superseded record as current
                       ("not patched" while a patch release controls; "good law" while an
                       overruling does), read with the policy's state words
                       (:mod:`car_rag.claims`), about the question's subject or a subject
                       whose record it cites;
``stale_citation``     it asserts a state and cites only replaced records;
``unknown_citation``   it cites a record the evidence does not number (``[EP-n]`` in the
                       packet forms, ``[Document n]`` in the plain form);
``unknown_version``    it names a version that appears in no record the guard knows: the
                       records the reader saw (and the rendered text), or, without them,
                       every record of the result's scopes;
``superseded_version`` every version it gives for the fix comes from a replaced record
                       (an affected range, an earlier release that a later one replaced),
                       while it asserts the state of the record that replaced it;
``ambiguous_state``    the question plausibly names several scopes in different states
                       (:class:`~car_rag.ambiguity.Ambiguity`) and the answer picks one
                       state as if it knew which scope is meant. An answer that says it
                       depends, that it cannot tell which one is meant, or that gives both
                       states is not flagged.

A version stated by a replaced record in the words of the state that replaced it (a
disclosure's "Fixed versions: 40.8.0, 39.8.1") is what holds now, not a replaced version.
A ``form`` says how the evidence numbers its records: an evidence form (``plain``:
``[Document n]``; ``reader``, ``audit``: ``[EP-n]``) or that numbering itself
(``documents``, ``packets``).

An answer is judged or not: an empty or non-text answer, or one that does not read as
English (the claim rules are English), gets ``judged=False`` with the reason, never an
exception. :func:`repair_messages` turns findings into one follow-up message asking the
same model for a corrected answer; call it only for flagged answers.

Modules: :mod:`~car_rag.guard.check` (judging an answer, repairing it),
:mod:`~car_rag.guard.evidence` (what an answer is judged against),
:mod:`~car_rag.guard.versions` (the version findings), :mod:`~car_rag.guard.findings`.
"""

from car_rag.guard.check import check_answer, repair_messages
from car_rag.guard.evidence import EvidenceForm, GuardEvidence, Numbering, scope_evidence, seen_evidence
from car_rag.guard.findings import Finding, FindingKind, GuardReport

__all__ = [
    "EvidenceForm",
    "Finding",
    "FindingKind",
    "GuardEvidence",
    "GuardReport",
    "Numbering",
    "check_answer",
    "repair_messages",
    "scope_evidence",
    "seen_evidence",
]
