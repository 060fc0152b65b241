"""The shipped device peaks table (queries/data/device_peaks.csv) checked on its own terms, independently of the code
that uses it: every device has a row for each datatype its hardware accelerates, every number has a source, the
matrix rates are dense (half the vendor's "with sparsity" figure where the source quotes one), and the units are the
table's (TFLOP/s, TB/s, GB/s). Then each device name found in the shared traces' deviceProperties maps to the row a
person reading the name would pick, and a rank whose device is unknown says so where users read diagnostics."""

from __future__ import annotations

import csv
import re

import polars as pl
import pytest

from tracekit.engine import peaks
from tracekit.engine.catalog import data_dir
from tracekit.query import analyses

HOPPER = {"fp64", "fp32", "tf32", "bf16", "fp16", "fp8", "int8"}
# What each device's hardware accelerates (vendor data sheets): Volta has no TF32/BF16, Ampere no FP8, CDNA2 no
# TF32/FP8, CDNA4 dropped TF32.
REQUIRED = {
    "H100 SXM": HOPPER, "H100 PCIe": HOPPER, "H100 NVL": HOPPER, "H200": HOPPER, "B200": HOPPER,
    "A100 SXM4 80GB": HOPPER - {"fp8"}, "A100 PCIe 80GB": HOPPER - {"fp8"}, "A100 40GB": HOPPER - {"fp8"},
    "V100 SXM2": {"fp64", "fp32", "fp16"}, "V100 PCIe": {"fp64", "fp32", "fp16"},
    "MI300X": HOPPER, "MI325X": HOPPER, "MI355X": HOPPER - {"tf32"},
    "MI250X (one GCD)": {"fp64", "fp32", "bf16", "fp16", "int8"}, "MI250 (one GCD)": {"fp64", "fp32", "bf16", "fp16", "int8"},
}
# The datatypes whose tensor/matrix rate vendors quote with 2:4 sparsity (NVIDIA from Ampere, AMD from CDNA3).
SPARSE_QUOTED = {"tf32", "bf16", "fp16", "fp8", "int8"}


@pytest.fixture(scope="module")
def rows() -> list[dict[str, str]]:
    """The CSV read as plain text rows (not through engine/peaks.py, which the last test checks against it)."""
    with open(data_dir("queries") / "data" / "device_peaks.csv", newline="") as f:
        return list(csv.DictReader(f))


def number(text: str) -> float | None:
    return float(text) if text else None


def test_every_required_device_and_datatype_has_exactly_one_row(rows):
    keys = [(r["device"], r["dtype"]) for r in rows]
    assert len(keys) == len(set(keys))
    assert {d: {t for dev, t in keys if dev == d} for d in {dev for dev, _ in keys}} == REQUIRED


def test_every_row_names_its_source_or_says_it_is_unverified(rows):
    for r in rows:
        source = r["source"]
        assert source.startswith("unverified:") or "https://" in source, (r["device"], r["dtype"], source)


def test_matrix_rates_are_dense(rows):
    """Each matrix rate of a datatype vendors quote with sparsity says it is dense; where its source quotes the
    vendor's sparse figure for the row (the first "N with sparsity" of the row), the rate is half of it (within
    the vendors' rounding, 0.2%)."""
    checked = 0
    for r in rows:
        if r["dtype"] not in SPARSE_QUOTED:
            continue
        source, matrix = r["source"], float(r["matrix_tflops"])
        assert "dense" in source or "no sparsity" in source, (r["device"], r["dtype"])
        quoted = re.search(r"(\d+(?:\.\d+)?) (PF |P )?with sparsity", source)
        if quoted:
            sparse = float(quoted[1]) * (1000 if quoted[2] else 1)
            assert abs(sparse / 2 - matrix) <= 0.002 * matrix, (r["device"], r["dtype"], sparse)
            checked += 1
    assert checked >= 40  # NVIDIA Ampere and later, AMD CDNA3: the quote is there to check


def test_rates_are_ordered_as_the_hardware_orders_them(rows):
    """Matrix ≥ vector for a datatype (tensor/matrix units never run slower than the vector units, and a datatype
    without matrix units has matrix = vector); narrower datatypes are no slower: fp64 ≤ fp32 ≤ tf32 ≤ 16-bit ≤ 8-bit;
    fp16 and bf16 run at one rate, fp8 and int8 at one rate."""
    by_device: dict[str, dict[str, dict[str, str]]] = {}
    for r in rows:
        by_device.setdefault(r["device"], {})[r["dtype"]] = r
        vector = number(r["vector_tflops"])
        if vector is not None:
            assert float(r["matrix_tflops"]) >= vector, (r["device"], r["dtype"])
    for device, dtypes in by_device.items():
        matrix = {t: float(r["matrix_tflops"]) for t, r in dtypes.items()}
        ladder = [matrix[t] for t in ("fp64", "fp32", "tf32", "fp16", "fp8") if t in matrix]
        assert ladder == sorted(ladder), device
        if "bf16" in matrix:
            assert matrix["fp16"] == matrix["bf16"], device
        if "fp8" in matrix:
            assert matrix["fp8"] == matrix["int8"], device


def test_units_and_ranges(rows):
    """TFLOP/s, TB/s and GB/s in one direction, not FLOP/s, GB/s and bidirectional totals: a 2017-2025 data-center
    GPU (or one GCD) has 0.5-10 TB/s of HBM, 5-10,000 dense TFLOP/s of matrix rate, and 100-1,000 GB/s of link
    bandwidth per direction. One device has one memory and one link, whatever the datatype."""
    for r in rows:
        assert 0.5 <= float(r["hbm_tb_per_s"]) <= 10, r["device"]
        assert 5 <= float(r["matrix_tflops"]) <= 10_000, (r["device"], r["dtype"])
        link = number(r["link_gb_per_s"])
        assert link is None or 100 <= link <= 1000, r["device"]
        assert r["num_sms"] == "" or 50 <= int(r["num_sms"]) <= 400, r["device"]
        re.compile(r["name_pattern"])
    for device in REQUIRED:
        same = {(r["hbm_tb_per_s"], r["link_gb_per_s"], r["name_pattern"], r["num_sms"])
                for r in rows if r["device"] == device}
        assert len(same) == 1, device


def test_the_loaded_table_is_the_csv(rows):
    loaded = peaks.default_peaks().to_pylist()
    assert [(r["device"], r["dtype"], r["matrix_tflops"], r["hbm_tb_per_s"]) for r in loaded] == [
        (r["device"], r["dtype"], float(r["matrix_tflops"]), float(r["hbm_tb_per_s"])) for r in rows]


# Every device name in the shared traces' deviceProperties (2026-11-26) and the row it must match. None: no row, and
# rightly so (a GPU the table lacks; "NVIDIA H100" with 132 SMs could be an SXM or an NVL, so no guess).
@pytest.mark.parametrize("trace, name, device", [
    ("nvidia/h100_bert-small.json.gz", "NVIDIA H100 80GB HBM3", "H100 SXM"),
    ("nvidia/h100_kineto_cuda_sync_unit.json", "NVIDIA H100", None),
    ("nvidia/b200_eager_rank0of8.json.gz", "NVIDIA B200", "B200"),
    ("nvidia/a100_trainer_rank0of16_cudagraph.json.gz", "NVIDIA A100-SXM4-80GB", "A100 SXM4 80GB"),
    ("nvidia/a100_nccl_rank0of2.json.gz", "NVIDIA A100-PG509-200", "A100 40GB"),
    ("nvidia/v100_ns_resolution.json.gz", "Tesla V100-SXM2-32GB", "V100 SXM2"),
    ("nvidia/gp100_gpu_user_annotation.json.gz", "Quadro GP100", None),
    ("amd/mi300x_bert-small.json.gz", "AMD Instinct MI300X VF", "MI300X"),
    ("amd/mi300x_resnet_act_checkpoint_rank0of8.json.gz", "AMD Instinct MI300X", "MI300X"),
    ("amd/mi250_minitoy_train.json.gz", "AMD Radeon Graphics", "MI250 (one GCD)"),  # 104 compute units
    ("amd/mi300x_vllm_decode_graph_execution.json.gz", None, None),  # deviceProperties without a name
    ("other/mtia_inference.json.gz", "ARTEMIS", None),
])
def test_device_names_in_the_shared_traces_map_to_their_rows(trace, name, device, loaded_trace):
    matched = loaded_trace(trace).sql("select device_name, device from rank_devices()")
    assert matched.rows() == [(name, device)]


def test_an_unknown_device_is_a_diagnostics_note(loaded_trace):
    """The vLLM decode trace's device has no name: percent_of_peak is null, and the Diagnostics sheet's analyses,
    the terminal summary's (diagnostics_reasons) and the overview's count say why."""
    tables = loaded_trace("amd/mi300x_vllm_decode_graph_execution.json.gz")
    names = ["diagnostics_summary", "diagnostics_list", "diagnostics_reasons", "rank_info", "op_perf"]
    before = tables.diagnostics.num_rows
    failures: dict[str, str] = {}
    results = analyses.run_all(tables, names, failures)
    assert not failures
    assert results["op_perf"]["percent_of_peak"].null_count() == results["op_perf"].height > 0
    note = "unknown device: the trace's deviceProperties give no name; give --peak FILE"
    summary = results["diagnostics_summary"].filter(pl.col("reason") == "unknown_device")
    assert summary.select("stage", "entries", "dropped").rows() == [("query", 1, 0)]
    assert summary["example"][0].startswith(note)
    listed = results["diagnostics_list"].filter(pl.col("reason") == "unknown_device")
    assert listed["detail"].to_list() == summary["example"].to_list() and listed["position"].to_list() == [None]
    assert results["diagnostics_reasons"].filter(pl.col("reason") == "unknown_device")["ranks"].to_list() == [1]
    assert results["rank_info"]["diagnostics"].to_list() == [before + 1]


@pytest.mark.parametrize("trace", ["nvidia/h100_bert-small.json.gz", "other/cpu_only_rank34of300.json.gz"])
def test_no_unknown_device_note_for_a_known_device_or_a_rank_without_kernels(trace, loaded_trace):
    results = analyses.run_all(loaded_trace(trace), ["diagnostics_summary"], {})
    assert "unknown_device" not in results["diagnostics_summary"]["reason"].to_list()
