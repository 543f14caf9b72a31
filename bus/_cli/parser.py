"""The argument parser every ``hookbus`` command uses: plain-text help, options anywhere, a short usage line.

- Help is plain text: reStructuredText quoting in docstrings used as
  descriptions (double backticks, single backticks) is shown as plain words
  or 'quotes'.
- Options may follow positionals (``triggers test NAME --workspace ws``):
  a command without subcommands parses intermixed.
- Options marked with :func:`in_help_only` (the NATS credential flags) are
  listed in their help section but left out of the usage line.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Iterable, Sequence
from typing import Any, Final

_DOUBLE_BACKTICKS: Final = re.compile(r"``([^`]*)``")
_SINGLE_BACKTICKS: Final = re.compile(r"`([^`]+)`")
#: The attribute that keeps an option out of the usage line.
_HELP_ONLY: Final = "_hookbus_help_only"


def plain(text: str) -> str:
    """Text with reStructuredText quoting turned into plain text: ``x`` -> x, `x` -> 'x'."""
    return _SINGLE_BACKTICKS.sub(r"'\1'", _DOUBLE_BACKTICKS.sub(r"\1", text))


def in_help_only(actions: Iterable[argparse.Action]) -> None:
    """Leave these options out of the usage line (they stay in their help section)."""
    for action in actions:
        setattr(action, _HELP_ONLY, True)


class _Formatter(argparse.HelpFormatter):
    def _format_usage(
        self,
        usage: str | None,
        actions: Iterable[argparse.Action],
        groups: Iterable[argparse._MutuallyExclusiveGroup],
        prefix: str | None,
    ) -> str:
        shown = [action for action in actions if not getattr(action, _HELP_ONLY, False)]
        return super()._format_usage(usage, shown, groups, prefix)

    def _format_text(self, text: str) -> str:
        return super()._format_text(plain(text))

    def _expand_help(self, action: argparse.Action) -> str:
        return plain(super()._expand_help(action))


class _RawFormatter(_Formatter, argparse.RawDescriptionHelpFormatter):
    """Descriptions kept as written (module docstrings), still in plain text."""


class CommandParser(argparse.ArgumentParser):
    """An ArgumentParser with hookbus's help formatting and options accepted after positionals."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        wanted = kwargs.get("formatter_class", argparse.HelpFormatter)
        raw = isinstance(wanted, type) and issubclass(wanted, argparse.RawDescriptionHelpFormatter)
        kwargs["formatter_class"] = _RawFormatter if raw else _Formatter
        super().__init__(*args, **kwargs)
        self._intermixing = False

    def keep_order(self) -> None:
        """Options only before the positionals: for a command that hands the rest on (``hookbus isolate -- CMD``)."""
        self._intermixing = True

    def parse_known_args(  # type: ignore[override]  # the same call, typed as argparse's stub has it
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        """Intermixed when this parser has no subcommands of its own (argparse cannot mix those)."""
        if self._subparsers is not None or self._intermixing:
            return super().parse_known_args(args, namespace)
        self._intermixing = True
        try:
            return self.parse_known_intermixed_args(args, namespace)
        finally:
            self._intermixing = False


class _Version(argparse.Action):
    """``--version``: the installed package's version, looked up only when asked for."""

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, *args: Any, **kwargs: Any) -> None:
        from importlib.metadata import PackageNotFoundError, version

        try:
            found = version("hookbus")
        except PackageNotFoundError:
            found = "unknown (not installed)"
        print(f"hookbus {found}", file=sys.stdout)
        parser.exit()


def add_version(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--version", action=_Version, help="print the hookbus version and exit")


def also_after(parent: argparse.ArgumentParser, flag: str, *subcommands: argparse.ArgumentParser) -> None:
    """Accept ``parent``'s option ``flag`` after a subcommand too (``triggers test NAME --workspace ws``).

    argparse reads a parent's options only before the subcommand; the copy
    sets the value only when given, so the parent's default stands otherwise.
    """
    original = next(action for action in parent._actions if flag in action.option_strings)
    same: dict[str, Any] = {"dest": original.dest, "metavar": original.metavar, "help": original.help}
    if original.type is not None:
        same["type"] = original.type
    for sub in subcommands:
        sub.add_argument(*original.option_strings, default=argparse.SUPPRESS, **same)


def add_command(
    subparsers: argparse._SubParsersAction[argparse.ArgumentParser], name: str, help: str, description: str | None
) -> argparse.ArgumentParser:
    """A command whose description is its module's docstring, shown with its line breaks kept."""
    return subparsers.add_parser(
        name, help=help, description=description, formatter_class=argparse.RawDescriptionHelpFormatter
    )
