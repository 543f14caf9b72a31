"""The public surface: the modules docs/architecture.md declares public are the only ones without a private name.

A module is private when a part of its dotted name starts with an underscore (``bus._core.envelope``,
``subscribers.shell_hooks._worker``); everything a user may import is declared in the "Public surface"
section of docs/architecture.md, and every module the README and docs/ name is one of those.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("bus", "subscribers", "triggers")
#: The pages a user reads (docs/architecture.md and CONTRIBUTING.md describe the insides, and may name them).
DOCS = [ROOT / "README.md", *sorted(p for p in (ROOT / "docs").glob("*.md") if p.name != "architecture.md")]


def _modules() -> set[str]:
    found = set()
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] in ("__init__", "__main__"):
                parts.pop()
            found.add(".".join(parts))
    return found


MODULES = _modules()


def _private(module: str) -> bool:
    return any(part.startswith("_") for part in module.split("."))


def declared() -> set[str]:
    text = (ROOT / "docs" / "architecture.md").read_text()
    section = text.split("## Public surface", 1)[1].split("\n## ", 1)[0]
    return set(re.findall(r"^- `([\w.]+)`", section, re.M))


def test_the_public_modules_are_the_declared_ones() -> None:
    public = {m for m in MODULES if not _private(m)}
    assert declared(), "docs/architecture.md has a Public surface section listing modules"
    assert sorted(public - declared()) == [], "public by name but not declared: make private or declare"
    assert sorted(declared() - public) == [], "declared but missing or private"


def _named_in(text: str) -> set[str]:
    """Modules a text names: dotted names whose longest module prefix is a module of the tree."""
    named = set()
    for token in re.findall(r"(?<![\w.])(?:bus|subscribers|triggers)(?:\.\w+)+", text):
        parts = token.split(".")
        for cut in range(len(parts), 1, -1):
            candidate = ".".join(parts[:cut])
            if candidate in MODULES:
                named.add(candidate)
                break
    return named


def test_every_module_the_docs_name_is_public() -> None:
    leaks = {
        f"{doc.relative_to(ROOT)}: {module}"
        for doc in DOCS
        if doc.exists()
        for module in _named_in(doc.read_text())
        if _private(module)
    }
    assert sorted(leaks) == [], "the docs send users to private modules"


def test_the_check_sees_a_private_module_named_in_a_doc() -> None:
    private = next(m for m in sorted(MODULES) if _private(m))
    assert _named_in(f"see `{private}.something` for more") == {private}
    assert _named_in("see `bus.intercept` and hookbus.journal") == set()
