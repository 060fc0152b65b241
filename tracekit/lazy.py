"""A package's public names imported on first use: importing the package costs nothing, and a command pays only
for the modules it uses (its imports come before it reads a byte: bench/RESULTS.md, the import floor)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from importlib import import_module


def lazy_attributes(package: str, public: dict[str, str], aliases: dict[str, str] | None = None
                    ) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """The `__getattr__` and `__dir__` of PACKAGE (called from its `__init__`): PUBLIC maps each public name to the
    module that defines it (a sub-module's own name: the sub-module), ALIASES other names for some of them. A name
    is imported when first read, then kept in the package's namespace."""
    namespace, aliases = sys.modules[package].__dict__, aliases or {}

    def __getattr__(name: str):
        attribute = aliases.get(name, name)
        if attribute not in public:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module = import_module(public[attribute])
        value = module if public[attribute] == f"{package}.{attribute}" else getattr(module, attribute)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted({*namespace, *public, *aliases})

    return __getattr__, __dir__
