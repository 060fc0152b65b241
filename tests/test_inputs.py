"""The input rules a command applies are the API's too (tracekit/inputs.py): a notebook user of `tracekit.load` and
`tracekit.open` gets the same refusal, with the same message, for an input with no events, and a warning for each
cut trace file; output paths are checked before anything is read."""

from __future__ import annotations

import json
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
from click.testing import CliRunner

import tracekit
from tests.conftest import REPO
from tracekit.cli import main
from tracekit.inputs import Inputs, is_dataset, resolve_inputs


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tracekit.cli", *args], capture_output=True, text=True, cwd=REPO,
                          timeout=120, check=False)


def entries(n: int) -> list[dict]:
    return [{"ph": "X", "cat": "cpu_op", "name": f"op{i}", "pid": 1, "tid": 1, "ts": i, "dur": 1} for i in range(n)]


@pytest.fixture
def cut_trace(tmp_path) -> tuple[Path, int]:
    """A trace cut inside its sixth entry, and the byte it was cut at (39 bytes into the entry)."""
    text = json.dumps({"traceEvents": entries(9)}).encode()
    at = text.index(b'"op5"') + 2
    assert text.rindex(b"{", 0, at) == text.index(b'{"ph": "X", "cat": "cpu_op", "name": "op5"')
    path = tmp_path / "cut.json"
    path.write_bytes(text[:at])
    return path, at


@pytest.mark.parametrize("content,why", [('{"traceEvents": []}', "traceEvents is empty"),
                                         ("[1, 2, 3]", "none of its 3 entries is a usable event")])
def test_api_and_cli_refuse_an_input_without_events_with_one_message(tmp_path, content, why):
    path = tmp_path / "nothing.json"
    path.write_text(content)
    expected = f"{path}: no trace events ({why})"
    for api in (tracekit.load, tracekit.open):
        with pytest.raises(tracekit.InputError) as refused:
            api(path)
        assert str(refused.value) == expected
    result = cli("sql", "select 1", str(path))
    assert result.returncode == 2 and result.stderr.splitlines() == [f"tracekit: error: {expected}"]


def test_a_directory_is_named_as_given(tmp_path):
    (tmp_path / "rank0.json").write_text('{"traceEvents": []}')
    (tmp_path / "rank1.json").write_text('{"traceEvents": []}')
    with pytest.raises(tracekit.InputError, match=r"^" + str(tmp_path) + r": no trace events"):
        tracekit.load(tmp_path)


def test_require_events_false_gives_the_diagnostics_of_an_unusable_file(tmp_path):
    path = tmp_path / "numbers.json"
    path.write_text("[1, 2, 3]")
    tables = tracekit.load(path, require_events=False)
    assert tables.events.num_rows == 0
    assert tables.polars("diagnostics")["reason"].to_list() == ["not_an_object"] * 3


def test_load_warns_about_a_cut_file_and_keeps_its_complete_entries(cut_trace):
    path, at = cut_trace
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        tables = tracekit.load(path)
    assert tables.events.num_rows == 5
    cut = [w for w in caught if issubclass(w.category, tracekit.CutTraceWarning)]
    assert len(cut) == 1 and issubclass(tracekit.CutTraceWarning, UserWarning)
    message = str(cut[0].message)
    assert message.startswith(f"{path}: truncated at byte {at} (of the decompressed text); 5 complete entries")
    detail = tables.polars("diagnostics").filter(reason="truncated")["detail"].to_list()
    assert message == f"{path}: {detail[0]}"
    assert cut[0].filename == __file__  # shown at the notebook's line that called load, not inside tracekit


def test_a_complete_file_gives_no_warning(cut_trace, tmp_path):
    whole = tmp_path / "whole.json"
    whole.write_text(json.dumps({"traceEvents": entries(9)}))
    with warnings.catch_warnings():
        warnings.simplefilter("error", tracekit.CutTraceWarning)
        assert tracekit.load(whole).events.num_rows == 9
        with pytest.raises(tracekit.CutTraceWarning):  # the filter is live: a cut file does raise
            tracekit.load(cut_trace[0])


def test_a_dataset_of_a_cut_file_warns_when_loaded_and_when_opened_in_place(cut_trace, tmp_path):
    path, at = cut_trace
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", tracekit.CutTraceWarning)
        tracekit.write_dataset(tracekit.load(path), tmp_path / "ds")
    for api in (tracekit.load, tracekit.open):
        with pytest.warns(tracekit.CutTraceWarning, match=rf"^{path}: truncated at byte {at} "):
            api(tmp_path / "ds")


def test_the_cli_prints_the_api_warning_once_as_its_own_line(cut_trace):
    path, at = cut_trace
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = CliRunner().invoke(main, ["sql", "select count(*) as n from events", str(path), "--format", "csv"])
    assert result.exit_code == 3, result.output
    assert result.stderr.splitlines() == [f"tracekit: warning: {path}: truncated at byte {at} (of the decompressed "
                                          f"text); 5 complete entries recovered; the entry cut short (from byte "
                                          f"{at - 39}) is dropped; top-level keys written after traceEvents (if any) "
                                          f"are lost"]
    assert result.stdout.splitlines() == ["n", "5"]
    assert [w for w in caught if issubclass(w.category, tracekit.CutTraceWarning)] == []


def test_resolve_inputs_tells_a_dataset_from_trace_files(tmp_path):
    synth_dir = tmp_path / "traces"
    tracekit.synth.generate(synth_dir, ranks=2, steps=1)
    traces = resolve_inputs(synth_dir)
    assert traces.dataset is None and [f.name for f in traces.files] == ["rank0.json", "rank1.json"]
    tracekit.write_dataset(tracekit.load(traces), tmp_path / "ds")
    assert is_dataset(tmp_path / "ds") and not is_dataset(synth_dir) and not is_dataset(tmp_path / "missing")
    dataset = resolve_inputs([tmp_path / "ds"])
    assert dataset == Inputs((tmp_path / "ds",), dataset=tmp_path / "ds") and resolve_inputs(dataset) is dataset
    # a dataset among other inputs: named as such (its _tracekit.json is no trace file)
    with pytest.raises(tracekit.InputError, match=rf"^{tmp_path / 'ds'}: an ingested dataset is read on its own"):
        resolve_inputs([tmp_path / "ds", synth_dir])


def test_diff_checks_its_output_before_reading_any_input(tmp_path):
    missing = tmp_path / "missing.json"
    result = cli("diff", str(missing), str(missing), "-o", str(tmp_path))
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        f"tracekit: error: {tmp_path}: is a directory (give the workbook's file name, e.g. diff.xlsx)"]
    (tmp_path / "old.xlsx").write_text("an earlier diff")
    result = cli("diff", str(missing), str(missing), "-o", str(tmp_path / "old.xlsx"))
    assert result.stderr.splitlines() == [f"tracekit: error: {tmp_path / 'old.xlsx'}: exists (use --force to "
                                          "replace it)"]
    assert (tmp_path / "old.xlsx").read_text() == "an earlier diff"
