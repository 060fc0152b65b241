"""The public API: every name `tracekit.__all__` promises exists, and the import paths kept for one release
(`tracekit.report`, `tracekit.analyses`) still give the same objects as their new homes."""

from __future__ import annotations

import importlib
import subprocess
import sys
import types

import pytest

import tracekit
from tests.conftest import REPO


@pytest.mark.parametrize("name", tracekit.__all__)
def test_every_name_in_all_exists(name):
    value = getattr(tracekit, name)  # AttributeError fails the test
    assert value is not None
    assert isinstance(value, types.ModuleType) or callable(value), f"{name}: {type(value).__name__}"


def test_all_names_the_entry_points_the_readme_promises():
    promised = {"load", "open_traces", "TraceTables", "TraceDatabase", "write_dataset", "read_dataset", "build_edges",
                "InputError", "CutTraceWarning", "write_reports", "diff", "synth"}
    assert promised <= set(tracekit.__all__), promised - set(tracekit.__all__)
    assert tracekit.open is tracekit.open_traces
    assert "open" not in tracekit.__all__  # `from tracekit import *` must not shadow the builtin open
    assert callable(tracekit.diff.compare) and callable(tracekit.synth.generate)


def test_star_import_gives_all_and_keeps_the_builtin_open():
    namespace: dict = {}
    exec("from tracekit import *", namespace)
    assert set(tracekit.__all__) <= set(namespace)
    assert "open" not in namespace


@pytest.mark.parametrize("old,new", [("tracekit.report", "tracekit.output.workbooks"),
                                     ("tracekit.analyses", "tracekit.query.analyses"),
                                     ("tracekit.analyses", "tracekit.engine.catalog")])
def test_deprecated_paths_re_export_the_same_objects(old, new):
    old_module, new_module = importlib.import_module(old), importlib.import_module(new)
    shared = [name for name in old_module.__all__ if hasattr(new_module, name)]
    assert shared, f"{old} re-exports nothing of {new}"
    for name in shared:
        assert getattr(old_module, name) is getattr(new_module, name), f"{old}.{name}"
    for name in old_module.__all__:
        assert hasattr(old_module, name), f"{old}.{name}"


@pytest.mark.parametrize("statement", [
    "from tracekit.report import write_reports, run_analyses, check_out_dir, workbook_spec",
    "from tracekit.analyses import run, run_all, sql, available, connect",
    "from tracekit import diff; diff.compare, diff.summarize, diff.write_workbook",
    "from tracekit import synth; synth.generate, synth.read_ground_truth, synth.SynthConfig",
    "import tracekit; tracekit.open, tracekit.load",
])
def test_documented_import_lines_work_in_a_fresh_interpreter(statement):
    result = subprocess.run([sys.executable, "-c", statement], capture_output=True, text=True, cwd=REPO, check=False)
    assert result.returncode == 0, result.stderr


def test_the_diff_packages_names_are_its_objects_whichever_module_loads_first():
    """tracekit.diff imports its names on first use (tracekit/lazy.py): a sub-module named as one of them would take
    that name's place in the package once something imported it (diff.compare, the function, was in compare.py)."""
    code = ("import importlib, pkgutil, tracekit.diff as d\n"
            "for m in pkgutil.iter_modules(d.__path__): importlib.import_module('tracekit.diff.' + m.name)\n"
            "clashes = [n for n in d.__all__ if getattr(d, n).__class__.__name__ == 'module' and n != 'verdicts']\n"
            "assert not clashes, clashes\n"
            "assert callable(d.compare) and callable(d.summarize) and d.DEFAULT_ALPHA == 0.05")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=False)
    assert result.returncode == 0, result.stderr
