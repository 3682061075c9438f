"""What `car-rag … --help` says: every flag reads right, and the default evidence is never called XML.

Every parser of the command line is walked (the top level, each command, ``postgres``'s own
commands), so an option added later is checked too.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from car_rag.cli import build_parser
from car_rag.cli.command import _Formatter

ROOT = Path(__file__).resolve().parents[2]


Parsers = Iterator[tuple[str, argparse.ArgumentParser]]


def parsers(parser: argparse.ArgumentParser | None = None, name: str = "car-rag") -> Parsers:
    parser = parser or build_parser()
    yield name, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for command, sub in action.choices.items():
                yield from parsers(sub, f"{name} {command}")


def shown_help(action: argparse.Action) -> str:
    """An option's help as --help prints it (the formatter's additions, before wrapping)."""
    return (_Formatter("car-rag")._get_help_string(action) or "") % {"default": action.default, "prog": "car-rag"}


FLAGS = [
    (f"{name} {'/'.join(a.option_strings)}", a)
    for name, p in parsers()
    for a in p._actions
    if a.option_strings and a.nargs == 0 and not isinstance(a, (argparse._HelpAction, argparse._VersionAction))
]


def test_the_walk_finds_the_boolean_flags():
    names = {name for name, _ in FLAGS}
    assert {
        "car-rag query --no-latent-scope",
        "car-rag serve --no-latent-scope",
        "car-rag report --no-evidence",
        "car-rag ingest --strict",
    } <= names
    assert any(isinstance(a, argparse._StoreFalseAction) for _, a in FLAGS)


@pytest.mark.parametrize("flag", FLAGS, ids=[name for name, _ in FLAGS])
def test_a_boolean_flag_says_what_it_does_not_its_default(flag):
    name, action = flag
    assert action.help, f"{name} has no help"
    assert shown_help(action) == action.help, f"{name}: {shown_help(action)!r}"
    assert not re.search(r"\(default: (True|False)\)", shown_help(action)), name


def test_no_help_page_says_a_boolean_default():
    for name, parser in parsers():
        text = " ".join(parser.format_help().split())
        assert "(default: True)" not in text and "(default: False)" not in text, name


def test_an_option_with_a_value_says_its_default_once():
    k = next(a for a in dict(parsers())["car-rag query"]._actions if "--k" in a.option_strings)
    assert shown_help(k) == "records to return (default: 5)"
    for name, parser in parsers():
        for action in parser._actions:
            assert shown_help(action).count("(default") <= 1, f"{name} {action.option_strings}: {shown_help(action)!r}"


# The default evidence for a model is the records as numbered plain documents; "XML" names the
# audit form (and the reader-first form's markup), never the default.
def unqualified_xml(text: str) -> list[str]:
    """Each mention of XML not said to be the audit form (the word "audit" just before it)."""
    return [
        text[max(0, m.start() - 60) : m.end() + 20]
        for m in re.finditer(r"\bXML\b", text)
        if "audit" not in text[max(0, m.start() - 40) : m.start()].lower()
    ]


def test_the_check_catches_the_old_wording():
    assert unqualified_xml("runnables that turn its documents into car-rag's XML evidence packets")
    assert not unqualified_xml("xml: the audit XML (default: table)")


def test_no_help_text_calls_the_evidence_xml_unless_it_is_the_audit_form():
    for name, parser in parsers():
        text = " ".join(parser.format_help().split())
        assert not unqualified_xml(text), (name, unqualified_xml(text))
    query = " ".join(dict(parsers())["car-rag query"].format_help().split())
    assert "plain: what an LLM reads by default (the records as numbered plain documents)" in query


@pytest.mark.parametrize(
    "path", sorted([*ROOT.glob("integrations/*/README.md"), *ROOT.glob("examples/*.py")]), ids=lambda p: str(p.relative_to(ROOT))
)
def test_integration_readmes_and_examples_do_not_call_the_default_evidence_xml(path):
    text = " ".join(path.read_text(encoding="utf-8").split())
    assert not unqualified_xml(text), unqualified_xml(text)
