"""Every example in README.md and docs/*.md runs, and does what it says.

The examples are read from the markdown itself, so a new one is tested as soon as it is written:
- ```sh / ```bash blocks: each command (a line, or lines joined by an open quote; `&&` chains split) runs as a real
  process in a fresh folder that holds the inputs the examples name (below). It must exit 0 with no traceback and
  no `error:` line; a command with `-o PATH` must write PATH and say so; a `tracekit sql` query must return rows
  with the columns its select list names (checked through `tracekit.open(...).sql`, the same engine).
- ```python blocks: executed in such a folder, with `tables` (README: `analyses.run(tables, ...)`) loaded from
  `traces/`; `DIR` is the ingested dataset.
- ```sql blocks: a query over `DIR/...` files runs in plain DuckDB (any engine can read the dataset), any other in
  `tracekit sql -f` over the dataset; both must return rows with their select list's columns.
- ```json blocks: an excerpt of a file tracekit writes (`...` marks the cut): its keys must be the real file's.
- Blocks without a language are diagrams, folder layouts and synopses; indented blocks are other tools' commands
  (ASTRA-sim): neither is run.
The inputs: `trace.json.gz` (one rank of a synthetic 4-rank, 6-step job, with 8 kernels queued before the profiling
window), `traces/` (all four ranks), `dataset/` and
`DIR` (those ingested), `base/` and `cand/` (two captures of a 2-rank job), `odd.json` (a file without events).
EXCEPTIONS lists what is not run, each with the reason.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import duckdb
import pytest

import tracekit
from tests.conftest import REPO
from tracekit import synth

DOCUMENTS = ["README.md", *sorted(str(p.relative_to(REPO)) for p in (REPO / "docs").glob("*.md"))]

# (pattern searched in the command or block, reason): the only examples not run.
EXCEPTIONS = [
    (r"^pip install", "installs packages: the tests run in an installed environment (CI installs from pyproject.toml)"),
    (r"^python -m pytest", "the test suite itself"),
    (r"^apt-get ", "a system package (a JVM for Spark)"),
    (r"s3://", "needs an S3 bucket and credentials (URL inputs are tested with fsspec's memory:// in test_storage)"),
    (r"tcp://", "needs a running Dask cluster (the local:N scheduler runs here and in tests/cluster)"),
    (r"^python bench/second_engine\.py", "needs PySpark and a JVM (docs/scale.md reports its run)"),
    (r"\bspark\.read\b|-- .*written in Spark SQL", "Spark code: needs PySpark and a JVM (bench/second_engine.py)"),
]


@dataclass(frozen=True)
class Example:
    document: str
    line: int
    language: str
    text: str

    @property
    def id(self) -> str:
        return f"{self.document}:{self.line}"

    @property
    def key(self) -> str:
        """The test's id: the document and its text, so an edit above it leaves it alone (.ci/oldest_skip.txt)."""
        return f"{self.document}:{hashlib.sha1(self.text.encode()).hexdigest()[:10]}"


def fenced_blocks(document: str) -> list[Example]:
    blocks, language, start, lines = [], None, 0, []
    for number, line in enumerate((REPO / document).read_text().splitlines(), 1):
        fence = re.match(r"^\s*```(\w*)", line)
        if fence and language is None:
            language, start, lines = fence.group(1) or "text", number, []
        elif fence:
            blocks.append(Example(document, start, language, "\n".join(lines)))
            language = None
        elif language is not None:
            lines.append(line)
    return blocks


def shell_commands(example: Example) -> list[tuple[int, list[str]]]:
    """(line, argv) of each command of a shell block: a quote left open joins the next line; `&&` splits."""
    commands, pending, first = [], "", 0
    for offset, line in enumerate(example.text.splitlines(), 1):
        pending, first = (pending + "\n" + line, first) if pending else (line, example.line + offset)
        try:
            words = shlex.split(pending, comments=True)
        except ValueError:  # an open quote: the command goes on
            continue
        pending = ""
        while words:
            cut = words.index("&&") if "&&" in words else len(words)
            if words[:cut]:
                commands.append((first, words[:cut]))
            words = words[cut + 1:]
    assert not pending, f"{example.id}: a quote is never closed"
    return commands


def exception_for(text: str) -> str | None:
    return next((reason for pattern, reason in EXCEPTIONS if re.search(pattern, text, re.MULTILINE)), None)


def all_examples() -> list[Example]:
    return [b for d in DOCUMENTS for b in fenced_blocks(d)]


@pytest.fixture(scope="module")
def library(tmp_path_factory) -> Path:
    """The inputs the examples name, made once."""
    root = tmp_path_factory.mktemp("examples")
    synth.generate(root / "job", ranks=4, steps=6, seed=0)
    # queued kernels: GPU work with no launch call in the window, which an example asks about
    synth.generate(root / "job_gz", ranks=4, steps=6, seed=0, gzip=True, queued_kernels=8)
    (root / "trace.json.gz").symlink_to(root / "job_gz" / "rank0.json.gz")
    (root / "traces").mkdir()
    for rank in range(4):
        (root / "traces" / f"rank{rank}.json").symlink_to(root / "job" / f"rank{rank}.json")
    tracekit.write_dataset(tracekit.load(root / "traces"), root / "dataset")
    for side, noise_seed in (("base", 1), ("cand", 2)):
        synth.generate(root / side, ranks=2, steps=4, seed=1, noise=0.05, noise_seed=noise_seed)
        (root / side / synth.GROUND_TRUTH_FILE).unlink()
    (root / "odd.json").write_text('{"traceEvents": [], "schemaVersion": 1}')
    return root


@pytest.fixture
def folder(library, tmp_path) -> Path:
    """A fresh working folder holding the inputs (as links): an example's outputs never meet another's."""
    work = tmp_path / "work"
    work.mkdir()
    for name in ("trace.json.gz", "traces", "dataset", "base", "cand", "odd.json"):
        (work / name).symlink_to(library / name)
    return work


def select_columns(query: str) -> list[str]:
    """The output names of the outermost select list: `x as NAME`, `expr NAME`, or a bare (qualified) column."""
    text = re.sub(r"'[^']*'", "''", re.sub(r"--[^\n]*", "", query))
    depth, top, at = 0, [], 0
    for i, c in enumerate(text):
        depth += c == "("
        depth -= c == ")"
        if depth == 0:
            top.append(i)
    flat = "".join(text[i] if i in set(top) else " " for i in range(len(text)))
    starts = [m.end() for m in re.finditer(r"\bselect\b", flat, re.IGNORECASE)]
    if not starts:
        return []
    at = starts[-1]
    end = re.search(r"\bfrom\b", flat[at:], re.IGNORECASE)
    items, depth, current = [], 0, ""
    for c in text[at:at + end.start() if end else len(text)]:
        depth += c == "("
        depth -= c == ")"
        if c == "," and depth == 0:
            items.append(current)
            current = ""
        else:
            current += c
    items.append(current)
    names = []
    for item in (i.strip() for i in items):
        alias = re.search(r"(?:\bas\s+|\s)([A-Za-z_]\w*)$", item, re.IGNORECASE)
        if re.fullmatch(r"[\w.]+", item):
            names.append(item.rsplit(".", 1)[-1])
        elif alias and not item.endswith(")"):
            names.append(alias.group(1))
    return names


def check_rows(frame, query: str, where: str) -> None:
    assert frame.height > 0, f"{where}: the query returns no rows"
    missing = set(select_columns(query)) - set(frame.columns)
    assert not missing, f"{where}: columns {missing} not in the result ({frame.columns})"


def run_tracekit(words: list[str], cwd: Path, where: str) -> None:
    argv = [sys.executable, "-m", "tracekit.cli", *words[1:]]
    env = {**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "160"}
    result = subprocess.run(argv, input=".tables\n", capture_output=True, text=True, cwd=cwd, env=env,
                            timeout=600, check=False)
    said = result.stdout + result.stderr
    assert result.returncode == 0, f"{where}: {shlex.join(words)}: exit {result.returncode}\n{said[-3000:]}"
    assert "Traceback" not in said and "error:" not in result.stderr, f"{where}: {said[-3000:]}"
    assert said.strip(), f"{where}: prints nothing"
    outputs = [words[i + 1] for i, w in enumerate(words[:-1]) if w in ("-o", "--out")]
    for out in outputs:
        path = cwd / out
        assert path.exists() and (path.stat().st_size > 0 if path.is_file() else any(path.iterdir())), \
            f"{where}: {out} not written"
        assert Path(out).name.rstrip("/") in said or out.rstrip("/") in said, f"{where}: does not say it wrote {out}"
    if words[1] == "sql" and len(words) > 3 and not words[2].startswith("-") and not (cwd / words[2]).exists():
        inputs = []
        for word in words[3:]:
            if word.startswith("-"):
                break
            inputs.append(cwd / word)
        with tracekit.open(inputs) as db:
            check_rows(db.sql(words[2]), words[2], where)


def run_shell_block(example: Example, folder: Path) -> None:
    commands = shell_commands(example)
    assert commands, f"{example.id}: no command"
    for line, words in commands:
        where = f"{example.document}:{line}"
        if exception_for(shlex.join(words)):
            continue
        assert words[0] == "tracekit", f"{where}: {words[0]}: not a tracekit command and not in EXCEPTIONS"
        run_tracekit(words, folder, where)


def run_python_block(example: Example, folder: Path) -> None:
    code = example.text.replace('"DIR', f'"{folder / "dataset"}')
    before = Path.cwd()
    os.chdir(folder)
    try:
        namespace = {"__name__": "__example__"}
        if re.search(r"\btables\b", code) and not re.search(r"^tables\s*=", code, re.MULTILINE):
            namespace["tables"] = tracekit.load("traces/")
        exec(compile(code, example.id, "exec"), namespace)  # noqa: S102 (the documentation's own code)
    finally:
        os.chdir(before)


def run_sql_block(example: Example, folder: Path) -> None:
    if "'DIR/" in example.text:  # the dataset read by another engine
        query = example.text.replace("'DIR/", f"'{folder / 'dataset'}/")
        frame = duckdb.connect().sql(query.rstrip().rstrip(";")).pl()
    else:
        with tracekit.open(folder / "dataset") as db:
            frame = db.sql(example.text)
        run_tracekit(["tracekit", "sql", "-f", str(write_query(folder, example.text)), "dataset/"], folder, example.id)
    check_rows(frame, example.text, example.id)


def write_query(folder: Path, text: str) -> Path:
    path = folder / "query.sql"
    path.write_text(text)
    return path


def check_json_block(example: Example, library: Path) -> None:
    excerpt = json.loads(re.sub(r",\s*\.\.\.", "", example.text))
    if "schema_fingerprint" in excerpt:
        real = json.loads((library / "dataset" / "_tracekit.json").read_text())
    else:
        pytest.fail(f"{example.id}: which file is this an excerpt of? (teach check_json_block)")

    def same_keys(part, whole, path="") -> None:
        if isinstance(part, dict):
            assert isinstance(whole, dict) and set(part) <= set(whole), f"{example.id}: {path} keys {set(part)}"
            for key in part:
                same_keys(part[key], whole[key], f"{path}.{key}")

    same_keys(excerpt, real)


RUNNERS = {"sh": run_shell_block, "bash": run_shell_block, "python": run_python_block, "sql": run_sql_block}
NOT_RUN = {"text"}


@pytest.mark.parametrize("example", all_examples(), ids=lambda e: e.key)
def test_example_runs(example, folder, library):
    if example.language in NOT_RUN:
        pytest.skip("a diagram, folder layout or synopsis")
    reason = exception_for(example.text) if example.language != "sh" and example.language != "bash" else None
    if reason:
        pytest.skip(reason)
    if example.language == "json":
        check_json_block(example, library)
        return
    assert example.language in RUNNERS, f"{example.id}: ```{example.language} blocks: no runner (add one)"
    RUNNERS[example.language](example, folder)


def test_examples_are_found():
    """The reader sees the examples (a broken fence would silently test nothing)."""
    found = all_examples()
    assert {e.document for e in found} >= {"README.md", "docs/dataset.md", "docs/scale.md", "docs/replay.md"}
    commands = [w for e in found if e.language in ("sh", "bash") for _, w in shell_commands(e)]
    assert sum(w[0] == "tracekit" for w in commands) >= 20
    assert select_columns("select kind, count(*) n, sum(dur) / 1e6 as ms from events") == ["kind", "n", "ms"]
    assert select_columns("with a as (select x from t) select a.x, f(y) as z from a") == ["x", "z"]
