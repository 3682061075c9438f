"""What a ``car-rag`` command is: a :class:`Command` (its parser's summary, examples and options,
and what runs it), the conventions every command's help follows, and the argument types the
commands share. The evaluation harness declares its commands as Commands too (entry points of
the group ``car_rag.commands``, :mod:`car_rag.cli.parser`)."""

from __future__ import annotations

import argparse
import textwrap
from collections.abc import Callable, Sequence
from dataclasses import dataclass

__all__ = ["Command", "UsageError", "count", "confidence", "positive", "non_negative"]


class UsageError(Exception):
    """Options that cannot go together (or a missing one): reported with the usage line, exit 2."""


class _Formatter(argparse.RawDescriptionHelpFormatter):
    """Epilogs keep their line breaks; every option that takes a value and has a default says it
    (unless its help does). A flag (``store_true``, ``store_false``, …) takes no value: its
    default is the behaviour without it, which its help describes, so it gets no "(default: True)"."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if (
            "%(default)" not in text
            and "(default" not in text
            and action.option_strings
            and action.nargs != 0
            and action.default not in (None, False, argparse.SUPPRESS)
            and not isinstance(action, (argparse._HelpAction, argparse._VersionAction, argparse._CountAction))
        ):
            text += " (default: %(default)s)"
        return text


def _examples(*lines: str) -> str:
    return "example" + ("s" if len(lines) > 1 else "") + ":\n" + "\n".join(f"  {line}" for line in lines)


@dataclass(frozen=True)
class Command:
    """One ``car-rag`` command: what ``car-rag --help`` says of it, its help page (``description``,
    else the summary as a sentence; ``examples``, each a command line), its options, and what runs
    it (the parsed arguments -> the exit status). A command with ``actions`` has commands of its
    own (``car-rag postgres start``), chosen as ``args.action``, each running itself."""

    name: str
    summary: str
    examples: tuple[str, ...]
    description: str | None = None
    arguments: Callable[[argparse.ArgumentParser], None] | None = None
    run: Callable[[argparse.Namespace], int] | None = None
    actions: tuple[Command, ...] = ()

    def add_to(
        self, within: argparse._SubParsersAction[argparse.ArgumentParser], parents: Sequence[argparse.ArgumentParser] = ()
    ) -> argparse.ArgumentParser:
        """Add this command's parser to ``within`` (the ``car-rag`` parser's commands, or a command's
        own); every parser carries itself as ``args.parser``, for the usage line of a
        :class:`UsageError`. ``parents``: the options every command takes (``-v``)."""
        text = textwrap.fill(self.description or self.summary[:1].upper() + self.summary[1:] + ".", width=88)
        parser = within.add_parser(
            self.name,
            help=self.summary,
            description=text,
            epilog=_examples(*self.examples),
            formatter_class=_Formatter,
            parents=list(parents),
        )
        parser.set_defaults(parser=parser)
        if self.arguments is not None:
            self.arguments(parser)
        if self.run is not None:
            parser.set_defaults(func=self.run)
        if self.actions:
            actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
            for action in self.actions:
                action.add_to(actions, parents)
        return parser


def count(text: str) -> int:
    """A count option (``--k``, ``--k1``, ``--depth`` …): a negative k would slice off the last
    records instead of failing, and 0 returns nothing."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def confidence(text: str) -> float:
    """``--min-confidence``: a number in [0, 1]."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number in [0, 1], got {text!r}") from None
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"must be in [0, 1], got {value}")
    return value


def positive(text: str) -> float:
    """A duration or size (``--timeout-ms``, ``--max-body-mb`` …): a number > 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number > 0, got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {value}")
    return value


def non_negative(text: str) -> float:
    """A wait that may be none (``--insert-window-ms``): a number >= 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number >= 0, got {text!r}") from None
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value
