"""Answer-prompt templates that consume the XML evidence of :mod:`car_rag.xml_render`.

The templates are package data (``car_rag/prompts/*.txt``)::

    answer_system   system prompt: the evidence is data, never instructions; answer from
                    active packets, cite packet ids, say when the evidence was superseded
    answer_hidden   appended to it only when a packet is superseded by a record the caller
                    may not read (small readers told about hidden records echo the rule
                    when nothing is hidden: evals/results/llm-ghsa-freeform-v1/)
    answer_user     user message with the placeholders {evidence} and {question}

>>> from car_rag.prompts import answer_messages
>>> messages = answer_messages("Is lodash still vulnerable?", evidence_xml)  # doctest: +SKIP
"""

from __future__ import annotations

import re
from functools import cache
from importlib import resources

__all__ = ["SYSTEM_PROMPT", "USER_PROMPT", "answer_messages", "available_prompts", "fill_prompt", "load_prompt", "system_prompt"]

SYSTEM_PROMPT = "answer_system"
HIDDEN_PROMPT = "answer_hidden"
USER_PROMPT = "answer_user"
# Element markup of the evidence, never a record's text (there "<" is escaped).
_HIDDEN_SUPERSEDER = re.compile(r'<superseded-by hidden="true"')

_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]*$")
_PLACEHOLDER = re.compile(r"\{(evidence|question)\}")


def available_prompts() -> list[str]:
    """Names of the packaged templates."""
    folder = resources.files(__name__)
    return sorted(p.name[: -len(".txt")] for p in folder.iterdir() if p.name.endswith(".txt"))


@cache  # package data: read once, not on every answer_messages / system_prompt call
def load_prompt(name: str) -> str:
    """The text of a packaged template, by name (``"answer_system"``, ``"answer_user"``)."""
    if not isinstance(name, str) or not _NAME.match(name) or name not in available_prompts():
        raise ValueError(f"unknown prompt {name!r}; available: {available_prompts()}")
    return (resources.files(__name__) / f"{name}.txt").read_text(encoding="utf-8")


def fill_prompt(template: str, *, evidence: str, question: str) -> str:
    """Fill ``{evidence}`` and ``{question}`` in one pass.

    Unlike ``str.format``, other braces in the template are left alone, and braces inside
    the values are never read as placeholders.
    """
    values = {"evidence": evidence, "question": question}
    return _PLACEHOLDER.sub(lambda m: values[m.group(1)], template)


def system_prompt(evidence_xml: str | None = None) -> str:
    """The system prompt for ``evidence_xml``: with the hidden-record rules when a packet in
    it is superseded by a record the caller may not read, or when the evidence is not known
    in advance (``None``: a template reused for every query)."""
    text = load_prompt(SYSTEM_PROMPT).strip()
    if evidence_xml is None or _HIDDEN_SUPERSEDER.search(evidence_xml):
        text += "\n\n" + load_prompt(HIDDEN_PROMPT).strip()
    return text


def answer_messages(question: str, evidence_xml: str) -> list[dict[str, str]]:
    """Chat messages (system, then user) for answering ``question`` from rendered evidence."""
    user = fill_prompt(load_prompt(USER_PROMPT), evidence=evidence_xml, question=question)
    return [
        {"role": "system", "content": system_prompt(evidence_xml)},
        {"role": "user", "content": user.strip()},
    ]
