"""op_perf (queries/op_perf.sql) against oracles: TraceLens's perf-model CSVs (GEMM, SDPA_fwd, Normalization,
Unary/BinaryElementwise, Reduce_fwd) of the shared traces, FLOPs and bytes worked out by hand for a constructed trace,
and the vendors' datasheet numbers for the peak shares."""

from __future__ import annotations

import json

import polars as pl
import pyarrow as pa
import pytest

import tracekit
from tests.conftest import shared_trace
from tracekit.engine import peaks
from tracekit.errors import InputError
from tracekit.query import analyses

# TraceLens's CSV folder → the traces it was made from (vLLM decode: the graph replay merged with its capture)
TRACELENS = {
    "nvidia/h100_qwen1.5-0.5b": ["nvidia/h100_qwen1.5-0.5b"],
    "nvidia/h100_bert-small": ["nvidia/h100_bert-small"],
    "amd/mi300x_qwen1.5-0.5b": ["amd/mi300x_qwen1.5-0.5b"],
    "amd/mi300x_bert-small": ["amd/mi300x_bert-small"],
    "amd/mi300x_vllm_decode": ["amd/mi300x_vllm_decode_graph_capture", "amd/mi300x_vllm_decode_graph_execution"],
}
FAMILIES = ("GEMM", "SDPA_fwd", "SDPA_bwd", "CONV_fwd", "CONV_bwd", "Normalization", "UnaryElementwise",
            "BinaryElementwise", "Reduce_fwd")


def compact(text: str) -> str:
    """TraceLens's Python-repr lists as our compact JSON text."""
    return json.dumps(json.loads(text.replace("'", '"').replace("(", "[").replace(")", "]").replace("None", "null")),
                      separators=(",", ":"))


def within(ours, reference: float, rel: float = 0.01) -> bool:
    return ours is not None and abs(ours - reference) <= rel * abs(reference)


@pytest.fixture(scope="module", params=list(TRACELENS))
def tracelens_case(request):
    traces = [shared_trace(name + ".json.gz") for name in TRACELENS[request.param]]
    csvs = traces[0].parent / (request.param.split("/")[1] + ".tracelens_csvs")
    ours = pl.concat([analyses.run(tracekit.load(t), "op_perf") for t in traces])
    return request.param, ours, csvs


def test_flops_and_bytes_match_tracelens(tracelens_case):
    """Per call shape, FLOPs and bytes within 1% of TraceLens's (its MB are MiB): on at least 95% of the GEMM, SDPA
    and CONV rows and 90% of all rows, family by family (today: every row)."""
    case, ours, csvs = tracelens_case
    rates = {}
    for family in FAMILIES:
        path = csvs / f"{family}.csv"
        if not path.exists():
            continue
        reference = pl.read_csv(path, infer_schema_length=0)
        matched = 0
        for row in reference.iter_rows(named=True):
            mine = ours.filter((pl.col("name") == row["name"])
                               & (pl.col("input_dims") == compact(row["Input Dims_first"]))
                               & (pl.col("input_type") == compact(row["Input type_first"])))
            matched += mine.height > 0 and all(
                within(flops, float(row["GFLOPS_first"])) and within(moved, float(row["Data Moved (MB)_first"]) * 2**20)
                for flops, moved in mine.select("gflops_per_call", "bytes_per_call").iter_rows())
        rates[family] = (matched, reference.height)
    assert rates, f"no perf-model CSV in {csvs}"
    for family, (matched, rows) in rates.items():
        assert matched >= (0.95 if family.split("_")[0] in ("GEMM", "SDPA", "CONV") else 0.90) * rows, (case, rates)
    assert sum(m for m, _ in rates.values()) >= 0.90 * sum(n for _, n in rates.values()), (case, rates)


def test_every_gemm_row_of_a_known_device_has_its_peak_share(tracelens_case):
    """The vLLM decode traces' deviceProperties name is empty: unknown, and said so."""
    case, ours, _ = tracelens_case
    gemm = ours.filter(pl.col("category") == "GEMM")
    assert gemm.height > 0
    if case == "amd/mi300x_vllm_decode":
        assert set(gemm["peak_note"]) == {"unknown device: the trace's deviceProperties give no name; give --peak FILE"}
        assert gemm["percent_of_peak"].null_count() == gemm.height
        return
    assert gemm["device"].null_count() == 0, case
    assert gemm.filter(pl.col("kernel_total_us") > 0)["percent_of_peak"].null_count() == 0, case


def test_peak_share_of_an_h100_gemm_from_the_datasheet():
    """aten::mm 8944×1024×2816 bf16 on the H100 Qwen trace, recomputed from the trace's own kernel time and NVIDIA's
    H100 SXM datasheet: 989.4 dense BF16 TFLOP/s, 3.35 TB/s."""
    ours = analyses.run(tracekit.load(shared_trace("nvidia/h100_qwen1.5-0.5b.json.gz")), "op_perf")
    row = ours.filter((pl.col("name") == "aten::mm") & (pl.col("input_dims") == "[[8944,1024],[1024,2816]]")).row(
        0, named=True)
    flops = 2 * 8944 * 1024 * 2816
    moved = (8944 * 1024 + 1024 * 2816 + 8944 * 2816) * 2
    assert row["device"] == "H100 SXM" and row["compute_spec"] == "matrix_bf16"
    assert row["bound"] == ("compute" if flops / moved >= 989.4 / 3.35 else "memory")
    achieved = row["count"] * flops / (row["kernel_total_us"] * 1e-6) / 1e12
    expected = 100 * (achieved / 989.4 if row["bound"] == "compute" else row["tb_per_s"] / 3.35)
    assert row["percent_of_peak"] == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize("trace, device", [
    ("nvidia/h100_bert-small.json.gz", "H100 SXM"),
    ("amd/mi300x_bert-small.json.gz", "MI300X"),  # "AMD Instinct MI300X VF"
    ("nvidia/v100_ns_resolution.json.gz", "V100 SXM2"),  # "Tesla V100-SXM2-32GB"
    ("amd/mi250_minitoy_train.json.gz", "MI250 (one GCD)"),  # "AMD Radeon Graphics" with 104 compute units
])
def test_device_is_matched_from_device_properties(trace, device):
    tables = tracekit.load(shared_trace(trace))
    assert tables.sql("select device from rank_devices()")["device"].to_list() == [device]


def test_unknown_device_has_no_peak_and_says_why(tmp_path):
    tables = tracekit.load(shared_trace("nvidia/h100_bert-small.json.gz"))
    other = peaks.default_peaks().filter(pa.compute.field("device") == "MI300X")
    ours = analyses.run(tables.with_peaks(other), "op_perf")
    assert ours["percent_of_peak"].null_count() == ours.height
    assert ours["device"].null_count() == ours.height
    notes = set(ours.filter(pl.col("gflops_per_call").is_not_null())["peak_note"].to_list())
    assert notes == {"unknown device: NVIDIA H100 80GB HBM3 matches no row of the device peaks table; "
                     "give --peak FILE"}


def test_peak_file_replaces_the_table(tmp_path):
    path = tmp_path / "peaks.csv"
    path.write_text(",".join(peaks.COLUMNS) + "\n" + "Mine,H100,,bf16,100,10,1.0,,my measurement\n")
    tables = tracekit.load(shared_trace("nvidia/h100_bert-small.json.gz")).with_peaks(peaks.read_peaks(path))
    ours = analyses.run(tables, "op_perf").filter(pl.col("compute_spec") == "matrix_bf16")
    assert set(ours["device"].to_list()) == {"Mine"}
    row = ours.row(0, named=True)
    assert row["percent_of_peak"] == pytest.approx(100 * max(row["tflops_per_s"] / 100, row["tb_per_s"] / 1.0))


@pytest.mark.parametrize("text, message", [
    ("device,dtype\nX,bf16\n", r"lacks column\(s\) name_pattern"),
    (",".join(peaks.COLUMNS) + "\nX,X,,bf17,1,1,1,,s\n", "dtype 'bf17'"),
    (",".join(peaks.COLUMNS) + "\nX,X,,bf16,1,1,,,s\n", "empty hbm_tb_per_s"),
    (",".join(peaks.COLUMNS) + "\nX,X,,bf16,fast,1,1,,s\n", "not a readable peaks CSV"),
])
def test_bad_peak_file_is_one_clear_error(tmp_path, text, message):
    path = tmp_path / "peaks.csv"
    path.write_text(text)
    with pytest.raises(InputError, match=message):
        peaks.read_peaks(path)


# A constructed trace: one call of each modelled family, each with one 10 µs kernel; FLOPs and bytes by hand.
BF16, F32 = "c10::BFloat16", "float"


def op(name, ts, correlation, dims, types, concrete=None):
    args = {"Input Dims": dims, "Input type": types}
    if concrete is not None:
        args["Concrete Inputs"] = concrete
    return [{"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": 8, "args": args},
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": ts + 1, "dur": 2,
             "args": {"correlation": correlation}},
            {"ph": "X", "cat": "kernel", "name": f"k{correlation}", "pid": 0, "tid": 7, "ts": 1000 + 20 * correlation,
             "dur": 10, "args": {"device": 0, "stream": 7, "correlation": correlation}}]


HAND = {  # name: (events, GFLOP, bytes)
    "aten::_scaled_dot_product_efficient_attention_backward": (
        op("aten::_scaled_dot_product_efficient_attention_backward", 10, 1,
           [[2, 4, 128, 64]] * 4 + [[], [2, 4, 128, 64], [2, 4, 128], [], [], [], [], [], []],
           [BF16] * 4 + ["", BF16, F32, "", "", "Scalar", "ScalarList", "Scalar", "Scalar"],
           [""] * 9 + ["0.", "[True, True, True, False]", "True", "0.125"]),
        # 2.5 × forward (4·B·H·N²·d), halved for causal; reads Q K V O dO, writes dQ dK dV: 2·(3 + 1) tensors
        2.5 * 0.5 * 4 * 2 * 4 * 128 * 128 * 64 / 1e9, 8 * 2 * 4 * 128 * 64 * 2),
    "aten::convolution": (
        op("aten::convolution", 30, 2, [[10, 3, 224, 224], [64, 3, 7, 7], [64], [], [], [], [], [], []],
           [BF16, BF16, BF16, "ScalarList", "ScalarList", "ScalarList", "Scalar", "ScalarList", "Scalar"],
           ["", "", "", "[2, 2]", "[3, 3]", "[1, 1]", "False", "[0, 0]", "1"]),
        # output 10×64×112×112; 2·MACs (3·7·7 each) plus the bias add
        (2 * 10 * 64 * 112 * 112 * 3 * 49 + 10 * 64 * 112 * 112) / 1e9,
        (10 * 3 * 224 * 224 + 64 * 3 * 49 + 10 * 64 * 112 * 112 + 64) * 2),
    "aten::convolution_backward": (
        op("aten::convolution_backward", 50, 3, [[10, 128, 28, 28], [10, 64, 56, 56], [128, 64, 1, 1]] + [[]] * 8,
           [BF16] * 3 + ["ScalarList"] * 4 + ["Scalar", "ScalarList", "Scalar", "ScalarList"],
           ["", "", "", "[0]", "[2, 2]", "[0, 0]", "[1, 1]", "False", "[0, 0]", "1", "[False, True, False]"]),
        # weight gradient only: one 2·MACs; reads dY, X, W, writes dW
        2 * 10 * 128 * 28 * 28 * 64 / 1e9, (10 * 128 * 28 * 28 + 10 * 64 * 56 * 56 + 2 * 128 * 64) * 2),
    "aten::native_batch_norm": (
        op("aten::native_batch_norm", 70, 4, [[8, 32, 16, 16], [32], [32], [32], [32], [], [], []],
           [F32] * 5 + ["Scalar"] * 3, [""] * 5 + ["True", "0.1", "1e-05"]),
        (5 * 8 * 32 * 256 + 6 * 32) / 1e9, (2 * 8 * 32 * 256 + 6 * 32) * 4),
    "aten::mul": (
        op("aten::mul", 90, 5, [[16, 1, 64], [8, 1]], [BF16, BF16]),
        16 * 8 * 64 / 1e9, (16 * 64 + 8 + 16 * 8 * 64) * 2),  # broadcast to 16×8×64
    "aten::sum": (
        op("aten::sum", 110, 6, [[4, 6, 5], [], [], []], [F32, "ScalarList", "Scalar", ""],
           ["", "[0, -1]", "False", ""]),
        4 * 6 * 5 / 1e9, (4 * 6 * 5 + 6) * 4),
    "aten::_softmax": (
        op("aten::_softmax", 130, 7, [[4, 1000], [], []], [BF16, "Scalar", "Scalar"], ["", "-1", "True"]),
        5 * 4000 / 1e9, 4000 * (2 + 4)),  # half_to_float: a float output
}


@pytest.fixture(scope="module")
def constructed(tmp_path_factory):
    path = tmp_path_factory.mktemp("op_perf") / "rank0.json"
    events = [e for evs, _, _ in HAND.values() for e in evs]
    path.write_text(json.dumps({"traceEvents": events, "deviceProperties": [{"id": 0, "name": "NVIDIA H200"}]}))
    return analyses.run(tracekit.load(path), "op_perf")


@pytest.mark.parametrize("name", list(HAND))
def test_hand_computed_flops_and_bytes(constructed, name):
    rows = constructed.filter(pl.col("name") == name)
    assert rows.height == 1, name
    row = rows.row(0, named=True)
    _, gflops, moved = HAND[name]
    assert row["gflops_per_call"] == pytest.approx(gflops, rel=1e-12)
    assert row["bytes_per_call"] == pytest.approx(moved, rel=1e-12)
    assert row["kernel_total_us"] == pytest.approx(10)
    assert row["tflops_per_s"] == pytest.approx(gflops * 1e9 / 10e-6 / 1e12)
    assert row["device"] == "H200"


# Collectives: nccl-tests' bus bandwidth factors, the algorithm from the kernel name, the link peak of the datasheet.
NCCL_TESTS_FACTOR = {"all_reduce": lambda n: 2 * (n - 1) / n, "all_gather": lambda n: (n - 1) / n,
                     "reduce_scatter": lambda n: (n - 1) / n, "all_to_all": lambda n: (n - 1) / n,
                     "broadcast": lambda n: 1.0, "reduce": lambda n: 1.0, "send_recv": lambda n: 1.0}


@pytest.mark.parametrize("trace, device, link", [
    ("nvidia/a100_nccl_rank0of2.json.gz", "A100 40GB", 300.0),  # NVLink 3: 600 GB/s total
    ("multirank/dlrm_8ranks_v100/worker0.pt.trace.json.gz", "V100 SXM2", 150.0),  # NVLink 2: 300 GB/s total
])
def test_collective_bus_bandwidth_and_link_share(trace, device, link):
    tables = tracekit.load(shared_trace(trace))
    calls = analyses.run(tables, "collective_perf")
    assert calls.height > 0
    kernels = {(r, g, q): k for r, g, q, k in
               tables.sql("select rank, process_group, seq, kernel_name from collectives").iter_rows()}
    for row in calls.filter(pl.col("algbw_gbps").is_not_null()).iter_rows(named=True):
        n = row["group_size"]
        assert row["bus_factor"] == pytest.approx(NCCL_TESTS_FACTOR[row["collective"]](n))
        assert row["busbw_gbps"] == pytest.approx(row["bytes"] / (row["duration_us"] * 1e3) * row["bus_factor"])
        assert row["device"] == device and row["link_peak_gbps"] == link
        assert row["percent_of_link_peak"] == pytest.approx(100 * row["busbw_gbps"] / link)
        name = kernels[(row["rank"], row["process_group"], row["seq"])]
        assert f"_{row['algorithm']}_{row['protocol']}" in name  # e.g. ncclKernel_AllReduce_RING_LL_Sum_float
    summary = analyses.run(tables, "collective_perf_summary")
    assert summary["calls"].sum() == calls.height
    for row in summary.filter(pl.col("busbw_median_gbps").is_not_null()).iter_rows(named=True):
        same = calls.filter((pl.col("collective") == row["collective"]) & (pl.col("bytes") == row["bytes"])
                            & (pl.col("dtype") == row["dtype"]) & (pl.col("process_group") == row["process_group"]))
        assert row["busbw_median_gbps"] == pytest.approx(same["busbw_gbps"].median())
        assert row["percent_of_link_peak_median"] == pytest.approx(100 * same["busbw_gbps"].median() / link)


@pytest.fixture(scope="module")
def resnet():
    """ResNet training on an MI300X (rank 0 of 8): convolutions, batch norms and RCCL collectives."""
    return analyses.run_all(tracekit.load(shared_trace("amd/mi300x_resnet_act_checkpoint_rank0of8.json.gz")),
                            ["op_perf", "collective_perf"])


def test_the_ops_of_one_convolution_agree(resnet):
    """conv2d → convolution → _convolution → miopen_convolution: four argument layouts (miopen's puts padding before
    stride), one convolution, so one FLOP and byte count per call shape; the 3×3 one worked out by hand."""
    conv = resnet["op_perf"].filter(pl.col("category") == "CONV_fwd")
    per_call = conv.group_by("count", "kernel_total_us").agg(
        pl.col("name").n_unique(), pl.col("gflops_per_call").n_unique(), pl.col("bytes_per_call").n_unique(),
        pl.col("nested").sum())
    assert per_call.height > 5
    assert set(per_call.select(pl.col("name"), pl.col("gflops_per_call"), pl.col("bytes_per_call"), pl.col("nested"))
               .iter_rows()) == {(4, 1, 1, 3)}
    first = conv.filter((pl.col("name") == "aten::miopen_convolution")
                        & (pl.col("input_dims") == "[[10,64,56,56],[64,64,3,3],[],[],[],[],[],[],[]]"))
    assert first["gflops_per_call"][0] == pytest.approx(2 * 10 * 64 * 56 * 56 * 64 * 9 / 1e9)  # stride 1, pad 1


def test_generic_rccl_kernels_have_no_algorithm(resnet):
    calls = resnet["collective_perf"]
    assert calls.height > 0 and calls["algorithm"].null_count() == calls.height
    assert set(calls["device"]) == {"MI300X"} and set(calls["link_peak_gbps"]) == {448.0}


def test_roofline_points_and_sheet(tmp_path):
    """The roofline analysis: shapes counted once (no nested rows), time shares adding to 100%, roof points on the
    datasheet's lines; the report's Roofline sheet holds a log-log scatter chart of them."""
    from openpyxl import load_workbook

    trace = shared_trace("nvidia/h100_qwen1.5-0.5b.json.gz")
    tables = tracekit.load(trace)
    roof = analyses.run(tables, "roofline")
    shapes = roof.filter(pl.col("series") == "op shapes")
    op_perf = analyses.run(tables, "op_perf").filter(~pl.col("nested") & (pl.col("gflops_per_call") > 0))
    assert shapes.height == op_perf.height
    assert shapes["percent_of_time"].sum() == pytest.approx(100)
    matrix = roof.filter(pl.col("series") == "roof: matrix bf16").sort("arithmetic_intensity")
    assert matrix["tflops_per_s"].to_list() == pytest.approx([0.01 * 3.35, 989.4, 989.4])
    assert matrix["arithmetic_intensity"][1] == pytest.approx(989.4 / 3.35)

    out = tmp_path / "report"
    from tracekit.output.workbooks import write_reports
    write_reports(tables, out)
    book = load_workbook(out / "rank0.xlsx")
    assert "Roofline" in book.sheetnames and "Perf GEMM" in book.sheetnames
    import zipfile
    with zipfile.ZipFile(out / "rank0.xlsx") as z:
        charts = [z.read(n).decode() for n in z.namelist() if n.startswith("xl/charts/chart")]
    scatter = [c for c in charts if "<c:scatterChart>" in c]
    assert len(scatter) == 1
    assert scatter[0].count("<c:logBase val=\"10\"/>") == 2  # both axes
    assert scatter[0].count("<c:ser>") == 1 + 2  # op shapes, matrix and vector roofs


def test_flash_layout_op_costs_what_its_sdpa_caller_does():
    """aten::_flash_attention_forward writes Q, K, V as [B, N, H, d] under the SDPA ops' [B, H, N, d]: the same
    attention, so the same FLOPs and bytes (TraceLens's SDPA_fwd row: 10.239377408 GFLOP, 69.875 MiB)."""
    ours = analyses.run(tracekit.load(shared_trace("nvidia/h100_qwen1.5-0.5b.json.gz")), "op_perf")
    sdpa = ours.filter(pl.col("category") == "SDPA_fwd")
    assert set(sdpa["name"]) == {"aten::scaled_dot_product_attention", "aten::_scaled_dot_product_flash_attention",
                                 "aten::_flash_attention_forward"}
    assert sdpa["gflops_per_call"].to_list() == pytest.approx([10.239377408] * 3)
    assert sdpa["bytes_per_call"].to_list() == pytest.approx([69.875 * 2**20] * 3)
    assert sdpa.filter(~pl.col("nested"))["name"].to_list() == ["aten::scaled_dot_product_attention"]


@pytest.mark.parametrize("command", ["run", "sql", "report"])
def test_cli_refuses_a_bad_peak_file_before_reading_traces(command, tmp_path):
    from click.testing import CliRunner

    from tracekit.cli import main

    trace = str(shared_trace("nvidia/h100_bert-small.json.gz"))
    bad = tmp_path / "peaks.csv"
    bad.write_text("device,dtype\nX,bf16\n")
    args = {"run": ["run", "op_perf", trace], "sql": ["sql", "from op_perf", trace],
            "report": ["report", trace, "-o", str(tmp_path / "out")]}[command]
    result = CliRunner().invoke(main, [*args, "--peak", str(bad)])
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [f"tracekit: error: {bad}: peaks CSV lacks column(s) name_pattern, num_sms, "
                                          "matrix_tflops, vector_tflops, hbm_tb_per_s, link_gb_per_s, source "
                                          f"(columns: {', '.join(peaks.COLUMNS)})"]
    assert not (tmp_path / "out").exists()


def test_cli_peak_file_is_what_percent_of_peak_uses(tmp_path):
    from click.testing import CliRunner

    from tracekit.cli import main

    trace = str(shared_trace("nvidia/h100_bert-small.json.gz"))
    path = tmp_path / "peaks.csv"
    path.write_text(",".join(peaks.COLUMNS) + "\n" + "Mine,H100,,bf16,100,10,1.0,,my measurement\n")
    out = tmp_path / "op_perf.csv"
    result = CliRunner().invoke(main, ["run", "op_perf", trace, "--peak", str(path), "-o", str(out)])
    assert result.exit_code == 0, result.output
    rows = pl.read_csv(out).filter(pl.col("compute_spec") == "matrix_bf16")
    assert set(rows["device"]) == {"Mine"} and set(rows["peak_tflops_per_s"]) == {100.0}
    assert "\n" not in "".join(rows["input_dims"])  # compact text in CSV
    # the table travels with the per-rank tasks: a report in worker processes uses it as one in this process does
    for where, option in (("here", []), ("pool", ["--jobs", "2"])):
        done = CliRunner().invoke(main, ["report", trace, "-o", str(tmp_path / where), "--peak", str(path), *option])
        assert done.exit_code == 0, done.output
    assert (tmp_path / "here" / "rank0.xlsx").read_bytes() == (tmp_path / "pool" / "rank0.xlsx").read_bytes()
