"""The category rule as docs/categories.md writes it, applied in Python: an independent implementation of the tables
there (read from the file, so the document and queries/lib/categories.sql are checked against each other)."""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "categories.md"


def _cells(line: str) -> list[str]:
    """A markdown table row's cells, `\\|` unescaped and code marks removed."""
    cells = re.split(r"(?<!\\)\|", line.strip())[1:-1]
    return [c.strip().replace("\\|", "|").strip("`") for c in cells]


@cache
def tables() -> dict[str, list[list[str]]]:
    """Numbered rows of each rule table, by the heading above it (its text up to the first parenthesis)."""
    out: dict[str, list[list[str]]] = {}
    heading = None
    for line in DOC.read_text().splitlines():
        if line.startswith("## "):
            heading = line[3:].split("(")[0].strip()
        elif heading and line.startswith("| ") and _cells(line)[0].isdigit():
            out.setdefault(heading, []).append(_cells(line))
    return out


def _matches(pattern: str, text: str) -> bool:
    return not pattern or re.search(pattern, text) is not None


def communication_kernel(name: str) -> bool:
    return any(_matches(pattern, name) and not (unless and re.search(unless, name))
               for _, pattern, unless, _ in tables()["Communication kernels"])


def op_base_name(name: str) -> str:
    text = re.sub(r"^autograd::engine::evaluate_function: ", "", name.lower())
    text = re.sub(r"^[a-z0-9_]+::", "", text)
    return re.sub(r"(_?backward\d*|_+)$", "", text)


def _first(rows, inputs: dict[str, str | bool]) -> str:
    for row in rows:
        category, source, pattern = row[1], row[2], row[3]
        unless = row[4] if len(row) > 4 else ""
        value = inputs[source]
        if isinstance(value, bool):
            hit = value
        else:
            hit = _matches(pattern, value) and not (unless and re.search(unless, value))
        if hit:
            return category
    raise AssertionError(f"no row matched {inputs}")


def gpu_timeline_category(name: str, kind: str) -> str:
    return _first(tables()["GPU timeline"], {"kind": kind, "kernel name": name if kind == "kernel" else "\0",
                                             "communication kernel": kind == "kernel" and communication_kernel(name),
                                             "any": True})


def kernel_category(name: str, kind: str) -> str:
    return _first(tables()["Kernel categories"], {
        "kind": kind, "kernel name": name, "kernel name without fbgemm": re.sub("(?i)fbgemm", "", name),
        "kernel name without parameters": re.sub(r"\([^()]*\)\s*$", "", name),
        "communication kernel": communication_kernel(name), "any": True})


def op_category(name: str) -> str:
    return _first(tables()["Op categories"], {
        "name": name, "lower name": name.lower(), "base name": op_base_name(name),
        "lower name without fbgemm": name.lower().replace("fbgemm", ""), "any": True})
