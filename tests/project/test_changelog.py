"""CHANGELOG.md stays a changelog a user reads: Keep a Changelog's form, released versions with dates, one short
line per change, and nothing of the engineering history (test files, internal modules) that commits keep."""

from __future__ import annotations

import datetime
import itertools
import re
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHANGELOG = (ROOT / "CHANGELOG.md").read_text()

#: Keep a Changelog's groups, in its order.
GROUPS = ["Added", "Changed", "Deprecated", "Removed", "Fixed", "Security"]
#: A change is one line a user reads at a glance.
MAX_LINE = 160
RELEASE = re.compile(r"## \[(\d+)\.(\d+)\.(\d+)\] - (\d{4}-\d{2}-\d{2})")
#: Paths a user never meets: the tests, and the product's own modules (users name them by import path, if public).
INTERNAL = re.compile(r"(?<![\w./-])(tests|bus|subscribers|triggers)/")


def problems(text: str) -> list[str]:
    """Every way the text departs from the form, one message each (empty: it keeps it)."""
    found: list[str] = []
    lines = text.splitlines()
    if not lines or lines[0] != "# Changelog":
        found.append("the first line is '# Changelog'")
    versions = [line for line in lines if line.startswith("## ")]
    if not versions or versions[0] != "## [Unreleased]":
        found.append("the first section is '## [Unreleased]'")
    if len(versions) < 2:
        found.append("at least one released version")
    released: list[tuple[tuple[int, int, int], datetime.date]] = []
    for heading in versions[1:]:
        match = RELEASE.fullmatch(heading)
        if match is None:
            found.append(f"{heading!r} is not '## [X.Y.Z] - YYYY-MM-DD'")
            continue
        try:
            day = datetime.date.fromisoformat(match.group(4))
        except ValueError:
            found.append(f"{heading!r}: no such date")
            continue
        released.append(((int(match.group(1)), int(match.group(2)), int(match.group(3))), day))
    for (newer, newer_day), (older, older_day) in itertools.pairwise(released):
        if not newer > older or newer_day < older_day:
            found.append(f"{newer} ({newer_day}) must be newer than the {older} ({older_day}) below it")
    found += _section_problems(lines)
    return found


def _section_problems(lines: list[str]) -> list[str]:
    found: list[str] = []
    version = group = None
    groups: list[str] = []
    bullets = 0
    for number, line in enumerate(lines, 1):
        where = f"line {number}"
        if line.startswith("## "):
            if version is not None and group is not None and bullets == 0:
                found.append(f"{version} {group}: an empty group")
            version, group, groups, bullets = line, None, [], 0
        elif line.startswith("### "):
            if group is not None and bullets == 0:
                found.append(f"{version} {group}: an empty group")
            group, bullets = line[4:], 0
            if group not in GROUPS:
                found.append(f"{where}: {group!r} is none of {GROUPS}")
            elif groups and GROUPS.index(group) <= GROUPS.index(groups[-1]):
                found.append(f"{where}: {group!r} after {groups[-1]!r} (the order is {GROUPS})")
            groups.append(group)
        elif line.startswith("- "):
            bullets += 1
            if version is None or group is None:
                found.append(f"{where}: a change outside a version's group")
            if len(line) >= MAX_LINE:
                found.append(f"{where}: {len(line)} characters (under {MAX_LINE})")
            if INTERNAL.search(line):
                found.append(f"{where}: names an internal path: {line[:80]!r}")
        elif line.strip() and version is not None:
            found.append(f"{where}: a version holds groups of one-line changes only: {line[:60]!r}")
    if version is not None and group is not None and bullets == 0:
        found.append(f"{version} {group}: an empty group")
    return found


def test_the_changelog_keeps_the_form() -> None:
    assert problems(CHANGELOG) == []


def test_the_package_version_is_the_newest_release() -> None:
    newest = next(match for line in CHANGELOG.splitlines() if (match := RELEASE.fullmatch(line)))
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["version"] == ".".join(newest.groups()[:3])


GOOD = """# Changelog

## [Unreleased]

## [0.2.0] - 2026-11-30

### Added

- `hookbus serve FILE`.

### Fixed

- A fix.

## [0.1.0] - 2026-11-29

### Added

- `Bus`.
"""


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (("## [0.2.0] - 2026-11-30", "## [0.2.0]"), "is not '## [X.Y.Z] - YYYY-MM-DD'"),
        (("2026-11-30", "2026-02-30"), "no such date"),
        (("## [0.1.0] - 2026-11-29", "## [0.3.0] - 2026-11-29"), "must be newer"),
        (("## [0.1.0] - 2026-11-29", "## [0.1.0] - 2026-12-29"), "must be newer"),
        (("## [Unreleased]\n", ""), "the first section is '## [Unreleased]'"),
        (("### Fixed", "### Fixes"), "is none of"),
        (("### Fixed\n\n- A fix.\n", "### Fixed\n"), "an empty group"),
        (("- A fix.", "- A fix. " + "x" * 160), "characters (under 160)"),
        (("- A fix.", "- A fix (`tests/test_fix.py`)."), "names an internal path"),
        (("- A fix.", "- A fix in `bus/_core/envelope.py`."), "names an internal path"),
        (("- A fix.", "- A fix.\n  carried on a second line"), "one-line changes only"),
        (("### Fixed\n\n- A fix.\n", ""), None),
    ],
)
def test_the_form_check_sees_each_departure(change: tuple[str, str], expected: str | None) -> None:
    assert problems(GOOD) == []
    found = problems(GOOD.replace(*change, 1))
    if expected is None:
        assert found == []
    else:
        assert any(expected in problem for problem in found), found


def test_the_form_check_sees_groups_out_of_order() -> None:
    swapped = GOOD.replace("### Added\n\n- `hookbus serve FILE`.", "### Fixed\n\n- B.", 1).replace(
        "### Fixed\n\n- A fix.", "### Added\n\n- A.", 1
    )
    assert any("after 'Fixed'" in problem for problem in problems(swapped))
