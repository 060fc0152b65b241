"""docs/architecture.md cannot drift: every path, module and `tracekit` command it names exists, and no docstring or
comment in tracekit/ names a tracekit module or file that does not."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import re

import pytest

from tests.conftest import REPO
from tracekit.cli import main

DOC = REPO / "docs" / "architecture.md"
PACKAGE = REPO / "tracekit"
FILE_SUFFIXES = (".py", ".sql", ".toml", ".md", ".csv", ".proto")


def spans(text: str) -> list[str]:
    """The text of every `code span` (and every line of ``` blocks left out: the diagram names packages by folder)."""
    text = re.sub(r"```.*?```", "", text, flags=re.DOTALL)
    return re.findall(r"`([^`\n]+)`", text)


def path_exists(span: str) -> bool:
    """A path relative to the repository or to tracekit/ (a bare file name: anywhere in tracekit/); NAME and * are
    placeholders; `path/module.attribute` names an attribute of that module."""
    pattern = span.rstrip("/").replace("NAME", "*")
    for base in (REPO, PACKAGE):
        if any(base.glob(pattern)):
            return True
    if "/" not in pattern and any(PACKAGE.rglob(pattern)):
        return True
    module, dot, attribute = span.rpartition(".")
    if dot and not span.endswith(FILE_SUFFIXES) and "/" in module:
        return has_attribute("tracekit." + module.replace("/", "."), attribute)
    return False


def has_attribute(module: str, attribute: str) -> bool:
    try:
        return hasattr(importlib.import_module(module), attribute)
    except ImportError:
        return False


def dotted_exists(span: str) -> bool:
    """`module.attribute` (tracekit's module: by its full name, or by its last part anywhere in the package:
    `catalog.ready` is tracekit.engine.catalog.ready) or a full module name."""
    name = re.sub(r"\(.*\)$", "", span)
    parts = name.split(".")
    if parts[0] == "tracekit":
        for cut in range(len(parts), 0, -1):
            module = ".".join(parts[:cut])
            try:  # found without running it: a module of an optional extra (Dask) need not import here
                spec = importlib.util.find_spec(module)
            except ImportError:
                spec = None
            if spec is None:
                continue
            if cut == len(parts):
                return True
            found = importlib.import_module(module)
            for attribute in parts[cut:]:
                if not hasattr(found, attribute):
                    return False
                found = getattr(found, attribute)
            return True
        return False
    modules = [*PACKAGE.rglob(f"{parts[0]}.py"), *(p.parent for p in PACKAGE.rglob(f"{parts[0]}/__init__.py"))]
    for path in modules:
        module = ".".join(path.relative_to(REPO).with_suffix("").parts)
        if has_attribute(module, parts[1]) if len(parts) > 1 else True:
            return True
    return False


def commands() -> set[str]:
    return set(main.list_commands(None))


def classify(span: str) -> str | None:
    if span.startswith("tracekit ") and re.fullmatch(r"tracekit [a-z]+.*", span):
        return "command"
    if re.fullmatch(r"[\w*./-]+", span) and ("/" in span or span.endswith(FILE_SUFFIXES)):
        return "path"
    if re.fullmatch(r"[a-z_]+(\.[A-Za-z_]+)+(\(.*\))?", span) and not span.endswith(FILE_SUFFIXES):
        return "dotted"
    return None


def named_in_doc() -> list[tuple[str, str]]:
    return sorted({(kind, span) for span in spans(DOC.read_text()) if (kind := classify(span))})


@pytest.mark.parametrize(("kind", "span"), named_in_doc())
def test_what_the_architecture_page_names_exists(kind, span):
    if kind == "command":
        assert span.split()[1] in commands(), f"docs/architecture.md: `{span}` is no registered command"
    elif kind == "path":
        assert path_exists(span), f"docs/architecture.md: `{span}` does not exist"
    else:
        assert dotted_exists(span), f"docs/architecture.md: `{span}` names no module or attribute"


def test_the_page_is_checked_and_the_check_can_fail():
    named = named_in_doc()
    assert sum(kind == "path" for kind, _ in named) > 20 and any(kind == "command" for kind, _ in named)
    assert not path_exists("tracekit/xlsx.py") and not path_exists("queries/nowhere/")
    assert not dotted_exists("tracekit.et") and not dotted_exists("catalog.no_such_function")
    assert "frobnicate" not in commands() and {"report", "timeline", "replay", "graph"} <= commands()


MODULE_MENTION = re.compile(r"""(?<!["'])(?:\btracekit/[\w/]+\.py\b|\btracekit(?:\.[a-z_]+)+\b)""")


def test_docstrings_and_comments_name_modules_that_exist():
    missing = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for line_number, line in enumerate(path.read_text().splitlines(), 1):
            for mention in MODULE_MENTION.findall(line):
                if "/" in mention:
                    ok = (REPO / mention).exists()
                else:
                    ok = dotted_exists(mention) or line.lstrip().startswith(("import ", "from "))
                if not ok:
                    missing.append(f"{path.relative_to(REPO)}:{line_number}: {mention}")
    assert not missing, "names of modules that do not exist:\n" + "\n".join(missing)


def test_every_package_says_what_it_is_for():
    """Each folder of Python modules (tracekit/, tests/, bench/) is an explicit package whose __init__.py opens with
    a docstring whose first line says what the package is for (tests/data/ holds data, and the scripts that
    recorded it)."""
    folders = {path.parent for top in ("tracekit", "tests", "bench") for path in (REPO / top).rglob("*.py")
               if "__pycache__" not in path.parts and not path.is_relative_to(REPO / "tests" / "data")}
    missing = []
    for folder in sorted(folders):
        init = folder / "__init__.py"
        text = init.read_text() if init.exists() else ""
        first = ast.get_docstring(ast.parse(text)) if text else None
        if not first or not first.splitlines()[0].strip():
            missing.append(str(init.relative_to(REPO)))
    assert not missing, f"packages without a one-line purpose in __init__.py: {missing}"
