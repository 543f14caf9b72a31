"""The public surface of `bus` is explicit, sorted, and everything in it exists."""

from __future__ import annotations

import bus


def test_all_is_sorted_and_complete() -> None:
    assert bus.__all__ == sorted(bus.__all__)
    for name in bus.__all__:
        assert hasattr(bus, name), name


def test_public_names_are_defined_in_private_looking_modules_only_through_bus() -> None:
    exported = {name for name in dir(bus) if not name.startswith("_")}
    submodules = {name for name in exported if type(getattr(bus, name)).__name__ == "module"}
    assert exported - submodules == set(bus.__all__)
