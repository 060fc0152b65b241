"""The pipeline's layering: each part of tracekit imports only from the layers below it (read ← link ← query ←
output ← diff ← cli), so a stage can be understood, tested and replaced without the ones after it."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.conftest import REPO

PACKAGE = REPO / "tracekit"

# Lower number = lower layer. A module may import its own part and any part of a lower layer, never a higher one
# nor another part of its own layer (diff and synth know nothing of each other).
LAYERS = {
    "tracekit.errors": 0, "tracekit.schema": 0, "tracekit.storage": 0, "tracekit.lazy": 0, "tracekit.machine": 0,
    "tracekit.engine": 1,
    "tracekit.read": 2,
    "tracekit.link": 3,
    "tracekit.inputs": 4,
    "tracekit.executors": 4,
    "tracekit.pipeline": 5,
    "tracekit.query": 6,
    "tracekit.output": 7,
    "tracekit.diff": 8, "tracekit.synth": 8, "tracekit.replay": 8,
    "tracekit.cluster": 9,
    "tracekit.cli": 10,
    # the public API and the import paths kept for one release
    "tracekit": 11, "tracekit.analyses": 11, "tracekit.report": 11,
}


def module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def part_of(module: str) -> str:
    """The longest LAYERS key that MODULE is or lies under."""
    candidates = [k for k in LAYERS if module == k or module.startswith(k + ".")]
    if not candidates:
        raise AssertionError(f"{module} is in no layer: add it to LAYERS")
    return max(candidates, key=len)


def imported_modules(path: Path, text: str | None = None) -> list[tuple[int, str]]:
    """(line, module) for every tracekit import in PATH (or in TEXT, read as if at PATH), relative ones resolved,
    also those inside functions."""
    package = module_name(path) if path.name == "__init__.py" else module_name(path).rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text() if text is None else text)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            # `from tracekit import schema` imports the module tracekit.schema, not the package
            found += [(node.lineno, f"{base}.{a.name}" if f"{base}.{a.name}" in LAYERS else base) for a in node.names]
    return [(line, m) for line, m in found if m == "tracekit" or m.startswith("tracekit.")]


MODULES = sorted(PACKAGE.rglob("*.py"))


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_imports_point_down_the_pipeline(path):
    here = part_of(module_name(path))
    wrong = [f"line {line}: {here} imports {m}" for line, m in imported_modules(path)
             if part_of(m) != here and LAYERS[part_of(m)] >= LAYERS[here]]
    assert not wrong, "\n".join(wrong)


def test_the_check_sees_an_upward_import():
    """The test above can fail: imports of the CLI and of output from the reader are seen as such."""
    probe = PACKAGE / "read" / "probe.py"
    text = "from tracekit.cli import main\nfrom ..output import xlsx\nfrom tracekit import schema\n"
    assert [part_of(m) for _, m in imported_modules(probe, text)] == ["tracekit.cli", "tracekit.output",
                                                                       "tracekit.schema"]


def test_every_module_is_in_a_layer():
    assert {part_of(module_name(p)) for p in MODULES} <= set(LAYERS)
