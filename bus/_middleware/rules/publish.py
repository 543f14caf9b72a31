"""Writing rule files to the fleet's ``hookbus_rules`` bucket (``hookbus rules push``, ``hookbus up``).

Every file is checked (parsed and compiled) before anything is written: a
broken file is refused with its file and line and never reaches a kernel.
Under the shipped permissions only the operator role may write the bucket.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from bus._core.errors import RegistryError
from bus._core.subjects import RULES_BUCKET
from bus._middleware.rules.compile import Rule, compile_file
from bus._middleware.rules.errors import RuleFileError
from bus._middleware.rules.files import read_path, stem_of
from bus._transport.port import Port

log = logging.getLogger("hookbus.middleware")


@dataclass(frozen=True, slots=True)
class Checked:
    """A rule file ready to push: its key (stem), its bytes, its compiled rules."""

    stem: str
    data: bytes
    rules: tuple[Rule, ...]


def check(paths: Iterable[str | Path]) -> list[Checked]:
    """Every file checked; RuleFileError for the first fault (nothing is written then)."""
    out = []
    for path in paths:
        rules = compile_file(read_path(path))
        out.append(Checked(stem_of(path), Path(path).read_bytes(), rules))
    return out


async def push(port: Port, files: Iterable[Checked]) -> None:
    """Write checked files to the bucket (created if missing); RegistryError if the server refuses."""
    kv = await port.ensure_bucket(RULES_BUCKET)
    for one in files:
        await kv.put(one.stem, one.data)


def check_folder(folder: Path) -> list[Checked] | None:
    """``folder/*.yaml`` checked, a broken file left out (logged); None without the folder."""
    if not folder.is_dir():
        return None
    good: list[Checked] = []
    for path in sorted(folder.glob("*.yaml")):
        try:
            good += check([path])
        except RuleFileError as exc:
            log.error("rule file refused, not pushed (kernels keep its last good version): %s", exc)
    return good


async def push_folder(port: Port, folder: Path, good: list[Checked] | None) -> str | None:
    """``hookbus up``: push the checked files of ``folder``; a summary line, or None without the folder.

    A server that refuses the write (the bus role under the shipped permissions) is reported, not fatal.
    """
    if good is None:
        return None
    try:
        await push(port, good)
    except RegistryError as exc:
        log.warning("could not write %s (%s): push them as the operator with 'hookbus rules push'", folder, exc)
        return f"{folder}: not pushed (this user may not write {RULES_BUCKET})"
    count = sum(len(one.rules) for one in good)
    return f"{folder}: {len(good)} file(s), {count} rule(s) pushed; new or changed rules wait for 'hookbus approve'"
