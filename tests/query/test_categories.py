"""One category rule (docs/categories.md, queries/lib/categories.sql), checked on every shared trace and on synth:
the categories and totals recomputed in Python/polars from the events with the documented patterns
(tests/support/categories.py), communication time against the union of the communication kernels' intervals,
op categories the same in every sheet, op and kernel agreeing, and no GEMM found by a substring of `fbgemm`."""

from __future__ import annotations

import re
from pathlib import Path

import polars as pl
import pytest

import tracekit
from tests.conftest import TRACES, all_kineto_traces, shared_trace, trace_id
from tests.support import categories as rule
from tracekit import synth
from tracekit.engine import catalog
from tracekit.output.chakra import chakra_graph
from tracekit.query import analyses

GPU_KINDS = ("kernel", "memcpy", "memset")
ANALYSES = ["kernel_summary", "op_summary", "op_by_shape", "op_categories", "gpu_timeline", "kernel_by_op"]


def union_ns(intervals: pl.DataFrame) -> int:
    """Length of the union of [start, end) intervals (columns start, end)."""
    total, run_start, run_end = 0, None, None
    for start, end in intervals.sort("start").select("start", "end").iter_rows():
        if run_end is None or start > run_end:
            total += 0 if run_end is None else run_end - run_start
            run_start, run_end = start, end
        else:
            run_end = max(run_end, end)
    return total + (0 if run_end is None else run_end - run_start)


def outermost_call_counts(events: pl.DataFrame, edges: pl.DataFrame) -> dict[tuple[int, str], int]:
    """(rank, op category) → calls with no enclosing cpu_op of the same category, found by climbing nest edges (not
    by the span containment op_categories uses)."""
    ops = (events.filter(pl.col("kind") == "cpu_op")
           .select("rank", "id", category=pl.col("name").map_elements(rule.op_category, return_dtype=pl.String)))
    parent_of = edges.filter(pl.col("kind") == "nest").select("rank", node="dst", parent="src")
    frontier = ops.select("rank", "id", "category", node="id")
    nested = []
    for _ in range(10_000):
        frontier = frontier.join(parent_of, on=["rank", "node"]).select("rank", "id", "category", node="parent")
        if frontier.height == 0:
            break
        same = frontier.join(ops.select("rank", node="id", parent_category="category"), on=["rank", "node"])
        nested.append(same.filter(pl.col("parent_category") == pl.col("category")).select("rank", "id"))
    else:
        raise AssertionError("nest edges form a cycle")
    outer = ops.join(pl.concat(nested).unique() if nested else ops.select("rank", "id").clear(),
                     on=["rank", "id"], how="anti")
    return {(r, c): n for r, c, n in outer.group_by("rank", "category").len().iter_rows()}


@pytest.fixture(scope="module")
def expert_parallel(tmp_path_factory):
    out = tmp_path_factory.mktemp("ep")
    synth.generate(out, ranks=2, steps=2, seed=3, expert_parallel=True)
    return out


def check_trace(tables: tracekit.TraceTables) -> dict[str, pl.DataFrame]:
    events, edges = tables.polars("events"), tables.polars("edges")
    got = analyses.run_all(tables, ANALYSES)

    # kernel categories: every GPU op's category is the documented rule's
    kernels = got["kernel_summary"].select("kernel_name", "kind", "category").unique()
    expected = [rule.kernel_category(n, k) for n, k in kernels.select("kernel_name", "kind").iter_rows()]
    wrong = kernels.with_columns(expected=pl.Series(expected, dtype=pl.String)).filter(
        pl.col("category") != pl.col("expected"))
    assert wrong.height == 0, wrong.head(5)
    # no GEMM by a substring of fbgemm, no embedding lookup called GEMM
    assert not kernels.filter((pl.col("category") == "GEMM")
                              & pl.col("kernel_name").str.contains("(?i)embedding")).height

    # op categories: the rule's, and one per name in every sheet
    # (the GPU time no rule owns has its own row, category unowned: not an op name)
    names = got["op_summary"].filter(pl.col("category") != "unowned").select("name", "category")
    wrong = names.filter(pl.col("category") != pl.col("name").map_elements(rule.op_category, return_dtype=pl.String))
    assert wrong.height == 0, wrong.head(5)
    for sheet, column, key in (("op_by_shape", "category", "name"), ("kernel_by_op", "op_category", "op_name")):
        pairs = got[sheet].select(name=key, category=column).drop_nulls("name").filter(
            pl.col("category") != "unowned").unique()
        assert pairs.join(names, on="name", how="anti", nulls_equal=True).height == 0, sheet
        assert pairs.join(names, on=["name", "category"], how="anti").height == 0, sheet

    # the per-call figures' denominator is the calls that launched GPU work (shown beside all calls)
    per_call = got["op_summary"].filter(pl.col("gpu_calls") > 0)
    assert ((per_call["kernel_mean_us"] * per_call["gpu_calls"] - per_call["direct_kernel_ms"] * 1e3).abs()
            <= 1e-6 * (1 + per_call["direct_kernel_ms"] * 1e3)).all()
    assert got["op_summary"].filter((pl.col("gpu_calls") == 0) & (pl.col("direct_kernel_ms") > 0)).height == 0

    # category totals recomputed: op_summary's direct time by the rule's category, calls by nest edges
    by_name = got["op_summary"].with_columns(
        recomputed=pl.when(pl.col("category") == "unowned").then(pl.lit("unowned"))
        .otherwise(pl.col("name").map_elements(rule.op_category, return_dtype=pl.String)))
    totals = (by_name.group_by("rank", "recomputed")
              .agg(ns=(pl.col("direct_kernel_ms") * 1e6).round().cast(pl.Int64).sum()))
    mine = got["op_categories"]
    assert {(r, c): ns for r, c, ns in totals.iter_rows()} == {
        (r, c): round(ms * 1e6) for r, c, ms in mine.select("rank", "category", "direct_kernel_ms").iter_rows()}
    counts = outermost_call_counts(events, edges)
    assert {(r, c): n for r, c, n in mine.select("rank", "category", "count").iter_rows()} == {
        key: counts.get(key, 0) for key in zip(mine["rank"], mine["category"])}

    # communication (and the rest of the GPU timeline's split) = the union of the rule's kernels' intervals
    launched = edges.filter(pl.col("kind") == "launch").select("rank", id="dst")
    gpu = (events.filter(pl.col("kind").is_in(GPU_KINDS) & pl.col("ts").is_not_null())
           .join(launched.unique(), on=["rank", "id"], how="semi")
           .select("rank", "name", "kind", start="ts", end=pl.col("ts") + pl.col("dur").fill_null(0)))
    gpu = gpu.with_columns(category=pl.struct("name", "kind").map_elements(
        lambda s: rule.gpu_timeline_category(s["name"], s["kind"]), return_dtype=pl.String))
    timeline = got["gpu_timeline"]
    for (rank,), ops in gpu.group_by("rank"):
        for category in ("computation", "communication", "memcpy"):
            want = union_ns(ops.filter(pl.col("category") == category))
            row = timeline.filter((pl.col("rank") == rank) & (pl.col("category") == category))
            assert round(row["time_ms"][0] * 1e6) == want, (rank, category)
    return got


@pytest.mark.parametrize("path", all_kineto_traces(), ids=trace_id)
def test_one_rule_on_every_shared_trace(path, loaded_trace):
    check_trace(loaded_trace(path))


def test_synth_expert_parallel_communication_equals_ground_truth(expert_parallel):
    """DeepEP dispatch/combine and custom all-reduce kernels (no NCCL args) are communication: the GPU timeline's
    communication equals the simulation's (made by construction, not by name); the collectives sheet has a row for
    each, typed by its name; the Chakra export makes them collectives."""
    truth = synth.read_ground_truth(expert_parallel)
    tables = tracekit.load(sorted(expert_parallel.glob("rank*.json")))
    got = check_trace(tables)
    collectives = analyses.run(tables, "collectives")
    for r in truth["ranks"]:
        timeline = dict(got["gpu_timeline"].filter(pl.col("rank") == r["rank"])
                        .select("category", "time_ms").iter_rows())
        for category, key in (("communication", "communication_ns"), ("computation", "computation_ns"),
                              ("exposed_communication", "exposed_comm_ns")):
            assert round(timeline[category] * 1e6) == r["gpu_timeline"][key], category
        library = r["library_collectives"]
        assert {c["collective"] for c in library} == {"all_to_all", "all_reduce"} and len(library) > 0
        mine = (collectives.filter((pl.col("rank") == r["rank"]) & (pl.col("args_source") == "kernel_name"))
                .sort("start_ns"))
        assert mine.select("kernel_name", "start_ns", "collective").rows() == [
            (c["kernel"], c["start"], c["collective"]) for c in library]
        assert mine["bytes"].is_null().all() and set(mine["process_group"]) == {"unknown"}
    nodes = chakra_graph(tables).nodes.filter(~pl.col("is_cpu_op"))
    deep_ep = nodes.filter(pl.col("name").str.contains("deep_ep::"))
    assert deep_ep.height and set(deep_ep["node_type"]) == {"COMM_COLL_NODE"}
    assert set(deep_ep["comm_type"]) == {"ALL_TO_ALL"}
    custom = nodes.filter(pl.col("name").str.contains("cross_device_reduce"))
    assert custom.height and set(custom["comm_type"]) == {"ALL_REDUCE"}


def test_communication_kernel_names_from_the_libraries():
    """Names as the libraries' sources define them (DeepEP, vLLM/SGLang, PyTorch symmetric memory, TensorRT-LLM)
    and near misses that are computation."""
    communication = [
        "void dpsk::ep::internode::dispatch<false, 8, 16>(int4*, float*)",
        "void dpsk::ep::internode::cached_notify<8>()",
        "void deep_ep::intranode::notify_dispatch<8>(int const*)", "void deep_ep::internode_ll::combine<false>(void*)",
        "void vllm::cross_device_reduce_2stage<c10::BFloat16, 4>(vllm::RankData*)",
        "void sglang::cross_device_reduce_1stage<float, 8>(sglang::RankData*)",
        "void (anonymous namespace)::multimem_all_reduce_kernel<c10::BFloat16, 16>(c10::BFloat16*)",
        "void tensorrt_llm::kernels::ar_fusion::allreduce_fusion_kernel_oneshot_lamport<1, float, 8, true>()",
        "void c10d::nvshmem_extension::all_to_all_vdev(void*, void*)", "nvshmemi_proxy_kernel",
        "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "rcclGenericKernel",
    ]
    computation = ["void deep_ep::layout::get_dispatch_layout<256, 32, 8>(long const*)",
                   "void deep_ep::internode_ll::clean_low_latency_buffer<32>(int*, int, int*, int)",
                   "triton_poi_fused_all_gather_into_tensor_0", "void at::native::reduce_kernel<512, 1>()",
                   "void fbgemm_gpu::split_embedding_codegen_forward_unweighted_kernel<float>()"]
    values = ", ".join("(" + "'" + n.replace("'", "''") + "')" for n in communication + computation)
    got = catalog.sql(tracekit.TraceTables(), "select name, communication_kernel(name) as c, "
                      f"kernel_category(name, 'kernel') as k from (values {values}) v(name)")
    flags = dict(got.select("name", "c").iter_rows())
    assert [n for n in communication if not flags[n]] == []
    assert [n for n in computation if flags[n]] == []
    assert all(rule.communication_kernel(n) == flags[n] for n in flags)  # the document says the same
    category = dict(got.select("name", "k").iter_rows())
    assert category[computation[-1]] == "embedding" and category[computation[-2]] == "reduction"


def shared_paths(*relative: str) -> list[Path]:
    return [TRACES / r for r in relative]


@pytest.mark.parametrize("path", shared_paths(
    "nvidia/h100_qwen1.5-0.5b.json.gz", "amd/mi300x_qwen1.5-0.5b.json.gz", "nvidia/h100_bert-small.json.gz",
    "amd/mi300x_resnet_act_checkpoint_rank0of8.json.gz", "multirank/dlrm_8ranks_v100",
    "nvidia/b200_eager_rank0of8.json.gz", "diff_pairs/resnet50_v100_workers0_vs_workers4/workers0.pt.trace.json.gz"),
    ids=trace_id)
def test_op_and_kernels_agree_where_they_should(path, loaded_trace):
    """On the shared traces with such ops: most of the direct kernel time of GEMM, attention, convolution,
    normalization, embedding and communication ops is kernels of the same category (MIOpen's convolutions are
    transposes and CK GEMMs: a documented limit, so ROCm convolution ops are left out)."""
    by_op = analyses.run(loaded_trace(path), "kernel_by_op")
    checked = ["GEMM", "attention", "normalization", "communication", "embedding"]
    rocm = path.relative_to(TRACES).parts[0] == "amd"
    owned = by_op.filter(pl.col("op_category").is_in(checked + ([] if rocm else ["convolution"])))
    share = (owned.group_by("op_category")
             .agg(same=pl.col("total_us").filter(pl.col("category") == pl.col("op_category")).sum(),
                  all=pl.col("total_us").sum())
             .with_columns(share=pl.col("same") / pl.col("all")))
    shares = share.select("op_category", "share").rows()
    # cuDNN runs some convolution algorithms as plain sgemm kernels (13% of the V100 ResNet's convolution time)
    low = [(c, round(s, 3)) for c, s in shares if s < (0.8 if c == "convolution" else 0.9)]
    assert shares and low == []


def test_vector_norm_op_and_kernel_are_both_reductions():
    kernel = ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::NormTwoOps<float, float,"
              " float>, unsigned int, float, 4> >(at::native::ReduceOp<float, at::native::NormTwoOps<float, float, "
              "float>, unsigned int, float, 4>)")
    got = catalog.sql(tracekit.TraceTables(), f"select op_category('aten::linalg_vector_norm') as op, "
                                              f"kernel_category('{kernel}', 'kernel') as k, "
                                              f"kernel_category('dma_request', 'kernel') as dma, "
                                              f"gpu_timeline_category('dma_request', 'kernel') as dma_timeline")
    assert got.row(0) == ("reduction", "reduction", "memcpy/memset", "memcpy")
    assert re.search("linalg_vector_norm", rule.tables()["Op categories"][10][3])


TOTALS_TRACES = ("nvidia/h100_qwen1.5-0.5b.json.gz", "amd/mi300x_qwen1.5-0.5b.json.gz",
                 "nvidia/h100_bert-small.json.gz",
                 "nvidia/b200_eager_rank0of8.json.gz", "amd/mi300x_resnet_act_checkpoint_rank0of8.json.gz",
                 "amd/mi300x_vllm_decode_graph_execution.json.gz", "nvidia/a100_trainer_rank0of16_cudagraph.json.gz",
                 "multirank/dlrm_8ranks_v100",
                 "diff_pairs/resnet50_v100_workers0_vs_workers4/workers0.pt.trace.json.gz",
                 "other/mtia_inference.json.gz")
CATEGORIES = ("GEMM", "attention", "convolution", "embedding", "normalization", "elementwise", "reduction", "MoE",
              "communication", "memcpy/memset", "other")


def totals_table(rows: dict[str, tuple[str, str]]) -> str:
    """docs/categories.md's totals block, given each trace's (op row, kernel row) in TOTALS_TRACES order."""
    header = "| trace | " + " | ".join(CATEGORIES) + " |"
    rule_line = "|---|" + "---|" * len(CATEGORIES)
    ops = [header, rule_line] + [rows[r][0] for r in TOTALS_TRACES]
    kernels = [header + " communication, GPU timeline |", rule_line + "---|"] + [rows[r][1] for r in TOTALS_TRACES]
    return ("Direct kernel time by op category (ms):\n\n" + "\n".join(ops)
            + "\n\nGPU time by kernel category (ms, summed durations):\n\n" + "\n".join(kernels))


def totals_rows(tables: tracekit.TraceTables, relative: str) -> tuple[str, str]:
    """A trace's rows (its lowest rank): direct kernel time by op category (op_categories), then GPU time by kernel
    category (kernel_summary), and the GPU timeline's communication (a union: overlaps counted once)."""
    got = analyses.run_all(tables, ["op_categories", "kernel_summary", "gpu_timeline"])
    rank = got["kernel_summary"]["rank"].min()
    by_op = dict(got["op_categories"].filter(pl.col("rank") == rank)
                 .select("category", "direct_kernel_ms").iter_rows())
    by_kernel = dict(got["kernel_summary"].filter(pl.col("rank") == rank).group_by("category")
                     .agg(pl.col("total_us").sum() / 1e3).iter_rows())
    comm = got["gpu_timeline"].filter((pl.col("rank") == rank) & (pl.col("category") == "communication"))
    return (f"| {relative} | " + " | ".join(f"{by_op[c]:.3f}" if c in by_op else "" for c in CATEGORIES) + " |",
            f"| {relative} | " + " | ".join(f"{by_kernel[c]:.3f}" if c in by_kernel else "" for c in CATEGORIES)
            + f" | {comm['time_ms'][0]:.3f} |")


def documented_totals() -> tuple[str, dict[str, tuple[str, ...]]]:
    """docs/categories.md's totals block, and each trace's rows in it (those opening with the trace's name)."""
    text = rule.DOC.read_text()
    current = text.split("<!-- totals:begin -->\n", 1)[1].split("<!-- totals:end -->", 1)[0].strip()
    return current, {r: tuple(line for line in current.splitlines() if line.startswith(f"| {r} |"))
                     for r in TOTALS_TRACES}


def test_category_totals_table_has_a_row_per_trace():
    """The block is the two tables with one row for each of TOTALS_TRACES, in order: with each row checked below,
    the whole block is what the rule gives."""
    current, rows = documented_totals()
    assert {r: len(found) for r, found in rows.items()} == {r: 2 for r in TOTALS_TRACES}
    assert current == totals_table(rows)


@pytest.mark.parametrize("path", shared_paths(*TOTALS_TRACES), ids=trace_id)
def test_category_totals_table_is_current(path, loaded_trace):
    relative = str(path.relative_to(TRACES))
    rows = totals_rows(loaded_trace(path), relative)
    assert documented_totals()[1][relative] == rows, (
        f"docs/categories.md's totals rows for {relative} are out of date; they should read:\n" + "\n".join(rows))


def test_mtia_keeps_its_device_name_and_its_headings_say_device(tmp_path, loaded_trace):
    """MTIA: its device is named by deviceProperties ("ARTEMIS") or, where a trace has none, by its process label
    ("MTIA 17"); the oracle is the trace's own JSON. Its workbook's headings say device, not GPU."""
    import gzip
    import json

    import openpyxl

    from tracekit.output import workbooks

    path = shared_trace("other/mtia_inference.json.gz")
    raw = json.loads(gzip.decompress(path.read_bytes()))
    tables = loaded_trace(path)
    info = analyses.run(tables, "rank_info")
    assert info.select("device_name", "device_type").rows() == [(raw["deviceProperties"][0]["name"], "MTIA")]
    del raw["deviceProperties"]
    bare = tmp_path / "no_device_properties.json"
    bare.write_text(json.dumps(raw))
    label = next(e["args"]["labels"] for e in raw["traceEvents"]
                 if e.get("ph") == "M" and e.get("name") == "process_labels" and "MTIA" in e["args"]["labels"])
    assert analyses.run(tracekit.load(bare), "rank_info")["device_name"].to_list() == [label]
    dma = analyses.run(tables, "kernel_summary").filter(pl.col("kernel_name") == "dma_request")
    assert dma["category"].to_list() == ["memcpy/memset"]
    paths = workbooks.write_reports(tables, tmp_path / "report")
    book = openpyxl.load_workbook(paths[0], read_only=True)
    text = [str(c) for ws in book.worksheets if ws.title != "Diagnostics"  # its rows quote the link stage's details
            for row in ws.iter_rows(values_only=True) for c in row if c]
    assert "Device timeline" in book.sheetnames and "GPU timeline" not in book.sheetnames
    assert any(t.startswith("Device time") for t in text) and not any(re.search(r"\bGPU\b", t) for t in text)
    # a GPU trace keeps saying GPU
    gpu = workbooks.device_word(analyses.run_all(loaded_trace("nvidia/h100_bert-small.json.gz"), ["rank_info"]))
    assert gpu == "GPU"


def test_diff_categories_move_the_same_way_in_total_and_per_step(loaded_trace):
    """The diff's Categories rows take their totals and their per-step values from one rule (op_categories, run
    over the whole capture and per step): a row whose total moves by >= 1 ms has its per-step effect moving the
    same way (the shared workers0/workers4 pair: elementwise copies move)."""
    from tracekit import diff

    pair = "diff_pairs/resnet50_v100_workers0_vs_workers4"
    result = diff.compare(loaded_trace(f"{pair}/workers0.pt.trace.json.gz"),
                          loaded_trace(f"{pair}/workers4.pt.trace.json.gz"))
    rows = result.sections["categories"].filter(pl.col("delta_direct_kernel_ms").abs() >= 1)
    assert rows.height > 0
    for row in rows.iter_rows(named=True):
        assert row["effect_direct_kernel_ms"] * row["delta_direct_kernel_ms"] > 0, row


def test_moe_batched_gemms_and_optimizer_kernels_have_their_category():
    """Kernels named as in the shared traces: TensorRT-LLM's FP8×FP4 expert GEMMs on B200 (44% of that trace's GPU
    time, once called other) and the fused Adam's multi_tensor_apply kernels on A100 (38 ms a step)."""
    moe_gemm = "bmm_MxE4m3_MxE2m1MxE4m3_Fp32_t128x16x256u2_s3_et128x16_m128x16x32_cga1x1x1_16dp256b_rM_TN_transOut"
    adam = ("void multi_tensor_apply_kernel<TensorListMetadata<4>, AdamFunctor<float>, float, float, float, float, "
            "float, float, adamMode_t, float>(long, int volatile*, TensorListMetadata<4>, AdamFunctor<float>)")
    got = catalog.sql(tracekit.TraceTables(), f"select kernel_category('{moe_gemm}', 'kernel'), "
                                              f"kernel_category('{adam}', 'kernel')")
    assert got.row(0) == ("GEMM", "elementwise")


def test_a_kernel_is_attention_by_its_name_and_template_not_by_its_parameter_types():
    """TensorRT-LLM's quantize kernel on the shared B200 trace takes a flashinfer:: parameter: no attention. Attention
    kernels whose name says so only in a template argument (a CUTLASS device_kernel wrapping FlashAttention's) or
    whose parameters also say it (PyTorch's memory-efficient attention) stay attention."""
    quantize = ("void tensorrt_llm::kernels::quantize_with_block_size<(tensorrt_llm::BlockScaleQuantizationType)2, "
                "__nv_bfloat16, 32, true>(int, int, int, int, __nv_bfloat16 const*, float const*, unsigned int*, "
                "unsigned int*, flashinfer::QuantizationSFLayout)")
    wrapped = ("void cutlass::device_kernel<flash::enable_sm90_or_later<flash::FlashAttnFwdSm90<cute::tuple<"
               "cute::C<1>>, true>>>(flash::FlashAttnFwdSm90<cute::tuple<cute::C<1>>, true>::Params)")
    mem_efficient = ("fmha_cutlassF_f16_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel<cutlass::half_t, "
                     "cutlass::arch::Sm80, true, 64, 64, 64, true, true>::Params)")
    got = catalog.sql(tracekit.TraceTables(), "select " + ", ".join(f"kernel_category('{n}', 'kernel')"
                                                                     for n in (quantize, wrapped, mem_efficient)))
    assert got.row(0) == ("other", "attention", "attention")
    assert [rule.kernel_category(n, "kernel") for n in (quantize, wrapped, mem_efficient)] == list(got.row(0))


def test_moe_op_and_kernel_names_from_the_libraries():
    """MoE names as vLLM, SGLang, aiter, triton_kernels, TensorRT-LLM and DeepEP define them (and as the shared B200
    and MI300X vLLM traces show them): the MoE layer's ops are MoE; its routing, sorting and combining kernels are MoE,
    its expert GEMMs GEMM; communication still wins, and Inductor kernels and sampling's top-k are not MoE."""
    ops = {"vllm::moe_forward": "MoE", "vllm::moe_forward_shared": "MoE", "vllm::inplace_fused_experts": "MoE",
           "_moe_C::topk_softmax": "MoE", "_moe_C::moe_align_block_size": "MoE", "_moe_C::moe_sum": "MoE",
           "_moe_C::grouped_topk": "MoE", "sgl_kernel::moe_fused_gate": "MoE", "sgl_kernel::topk_softmax": "MoE",
           "sgl_kernel::prepare_moe_input": "MoE", "sglang::outplace_fused_experts": "MoE",
           "aiter::fmoe_fp8_blockscale_g1u1": "MoE", "aiter::ck_moe_stage1": "MoE", "aiter::moe_sorting_fwd": "MoE",
           "aiter::biased_grouped_topk": "MoE", "aiter::topk_sigmoid": "MoE", "TopK": "MoE", "SortTokens": "MoE",
           "SortTokensBackward": "MoE",
           "deep_ep::dispatch": "communication", "c10d::all_to_all_single": "communication",
           "aten::topk": "other", "triton_poi_fused_constant_pad_nd_moe_forward_0": "other", "aten::mm": "GEMM"}
    kernels = {
        "void vllm::moe::topkGatingSoftmax<8, 8, 4, 16, int>(float const*, bool const*, float*, int, int*)": "MoE",
        "void vllm::moe::moe_align_block_size_kernel<int>(int const*, int*, int*, int*, int, int, int, int)": "MoE",
        "void vllm::moe::count_and_sort_expert_tokens_kernel<int>(int const*, int*, int*, unsigned long)": "MoE",
        "void vllm::moe::moe_sum_kernel<c10::BFloat16, 8>(c10::BFloat16*, c10::BFloat16 const*, int)": "MoE",
        "void vllm::moe::grouped_topk_fused_kernel<float, float, int>(float*, float*, int*, float const*)": "MoE",
        "moe_fused_gate_kernel": "MoE", "_combined_routing_compute": "MoE", "_combined_routing_memset": "MoE",
        "_sum_bitmatrix_rows": "MoE", "_topk_forward": "MoE", "_finalize_matmul_scatter_bf16": "MoE",
        "void moe::dev::routing::routingIndicesOffsetsKernel<moe::dev::routing::routingRenormalize::KernelParams"
        "<__nv_bfloat16, __nv_bfloat16, 128, false, true, true> >()": "MoE",
        "void moe::dev::finalize::finalizeKernelVecLoad<moe::dev::finalize::KernelParams<cutlass::bfloat16_t, "
        "cutlass::bfloat16_t, 4, true> >()": "MoE",
        "void deep_ep::layout::get_dispatch_layout<256, 32, 8>(long const*)": "MoE",
        "fused_moe_kernel": "GEMM", "fused_moe_kernel_gptq_awq": "GEMM",
        "_matmul_ogs_NNT_bf16xbf16xmxfp4_16x128x256x1_swiglu": "GEMM",
        "aiter::fmoe_bf16_blockscaleFp8_g1u1_vs_gelu_1tg_32x128": "GEMM",
        "void marlin_moe_wna16::Marlin<__nv_bfloat16, 4, 8, 4, 4, 4, false>(int4 const*)": "GEMM",
        "moe_ck2stages_gemm1_256x32x128x128_1x4_MulABScaleExpertWeightShuffled_v3": "GEMM",
        "void deep_ep::intranode::dispatch<8, 768, 8192>(int4*, float*)": "communication",
        "triton_poi_fused_constant_pad_nd_moe_forward_0": "elementwise",
        "void at::native::sbtopk::gatherTopK<float, unsigned int, 2, false>(at::cuda::detail::TensorInfo<float const, "
        "unsigned int>)": "other"}
    def quoted(names):
        return ", ".join("('" + n.replace("'", "''") + "')" for n in names)
    tables = tracekit.TraceTables()
    got_ops = dict(catalog.sql(tables, f"select name, op_category(name) from (values {quoted(ops)}) v(name)").rows())
    got_kernels = dict(catalog.sql(tables, "select name, kernel_category(name, 'kernel') "
                                           f"from (values {quoted(kernels)}) v(name)").rows())
    assert got_ops == ops and got_kernels == kernels
    # the document's tables say the same
    assert {n: rule.op_category(n) for n in ops} == ops
    assert {n: rule.kernel_category(n, "kernel") for n in kernels} == kernels


@pytest.mark.parametrize("engine, capture", [("vllm", "hip"), ("sglang", "cuda")])
def test_synth_serving_moe_equals_ground_truth(tmp_path, engine, capture):
    """`synth --serving --moe`: the MoE op category's direct kernel time is the GPU time the simulation gave the MoE
    block's ops (decode replays owned by the replay; with the capture read, by those ops too), the MoE kernel category
    is the block's routing, sorting and combine kernels, and its expert GEMMs are GEMM kernels (all by construction)."""
    synth.write(synth.synthesize_serving(synth.ServingConfig(engine=engine, ranks=2, iterations=10, seed=4, moe=True,
                                                             graph_capture=capture)), tmp_path)
    truth = synth.read_ground_truth(tmp_path)
    ranks = sorted(tmp_path.glob("rank*.json"))
    for captures, key in (([], "op_ns"), (sorted((tmp_path / "capture").glob("rank*.json")), "op_ns_with_capture")):
        tables = tracekit.load(ranks, graph_captures=captures)
        got = check_trace(tables)
        for r in truth["ranks"]:
            by_op = dict(got["op_categories"].filter(pl.col("rank") == r["rank"])
                         .select("category", "direct_kernel_ms").rows())
            kernels = got["kernel_summary"].filter(pl.col("rank") == r["rank"])
            by_kernel = dict(kernels.group_by("category").agg(pl.col("total_us").sum()).rows())
            expert = kernels.filter(pl.col("kernel_name") == "fused_moe_kernel")
            assert round(by_op["MoE"] * 1e6) == r["moe"][key] > 0
            assert round(by_kernel["MoE"] * 1e3) == r["moe"]["kernel_ns"] > 0
            assert set(expert["category"]) == {"GEMM"}
            assert round(expert["total_us"].sum() * 1e3) == r["moe"]["expert_gemm_ns"] > 0


def direct_kernel_us_by_op(raw: dict) -> dict[str, float]:
    """Per op name, the summed durations of the GPU ops whose launch call's innermost enclosing cpu_op on its thread
    is a call of that op (TraceLens's direct kernel time), from the trace's JSON alone; "" for launches outside
    every op."""
    events = [e for e in raw["traceEvents"] if e.get("ph") == "X"]
    gpu = {}
    for e in events:
        if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") and "correlation" in e.get("args", {}):
            gpu.setdefault(e["args"]["correlation"], []).append(e["dur"])
    by_thread: dict[tuple, list] = {}
    for e in events:
        if e.get("cat") == "cpu_op":
            by_thread.setdefault((e["pid"], e["tid"]), []).append((e["ts"], 0, -e["dur"], e))
        elif e.get("cat") in ("cuda_runtime", "cuda_driver") and e.get("args", {}).get("correlation") in gpu:
            by_thread.setdefault((e["pid"], e["tid"]), []).append((e["ts"], 1, -e["dur"], e))
    out: dict[str, float] = {}
    for items in by_thread.values():
        stack: list[dict] = []
        for ts, is_launch, _, e in sorted(items, key=lambda item: item[:3]):
            while stack and stack[-1]["ts"] + stack[-1]["dur"] < ts + e["dur"]:
                stack.pop()
            if is_launch:
                name = stack[-1]["name"] if stack else ""
                out[name] = out.get(name, 0.0) + sum(gpu[e["args"]["correlation"]])
            else:
                stack.append(e)
    return out


def test_vllm_moe_forward_is_moe_on_the_shared_b200_trace(loaded_trace):
    """The shared B200 vLLM trace: vllm::moe_forward's direct kernel time, computed from the JSON alone, is the MoE
    op category's (over half the GPU time, once called other); by the documented kernel rule its kernels are MoE
    (routing, finalize) or GEMM (the expert bmm_* kernels)."""
    import gzip
    import json

    path = shared_trace("nvidia/b200_eager_rank0of8.json.gz")
    raw = json.loads(gzip.decompress(path.read_bytes()))
    direct = direct_kernel_us_by_op(raw)
    moe_us, total_us = direct["vllm::moe_forward"], sum(direct.values())
    assert [n for n in direct if rule.op_category(n) == "MoE"] == ["vllm::moe_forward"]
    tables = loaded_trace(path)
    got = analyses.run_all(tables, ["op_categories", "kernel_by_op"])
    by_op = dict(got["op_categories"].select("category", "direct_kernel_ms").rows())
    assert by_op["MoE"] * 1e3 == pytest.approx(moe_us, abs=0.01)
    assert by_op["MoE"] / sum(by_op.values()) == pytest.approx(moe_us / total_us, abs=1e-4)
    assert moe_us / total_us > 0.5 and by_op.get("other", 0) < 0.1 * by_op["MoE"]
    kernels = got["kernel_by_op"].filter(pl.col("op_name") == "vllm::moe_forward")
    expected = [rule.kernel_category(n, k) for n, k in kernels.select("kernel_name", "kind").iter_rows()]
    share = kernels.with_columns(expected=pl.Series(expected)).filter(
        pl.col("expected").is_in(["MoE", "GEMM"]))["total_us"].sum() / moe_us
    assert share > 0.95


def test_moe_layer_of_the_shared_mi300x_decode_replay_against_tracelens():
    """The shared MI300X vLLM decode replay read with its capture: the MoE op category is the whole MoE layer,
    vllm::moe_forward with the routing ops nested in it (triton_kernels' SortTokens and TopK), which TraceLens's
    capture-merged ops_summary gives as moe_forward's subtree kernel time (and files under other)."""
    import csv

    replay = shared_trace("amd/mi300x_vllm_decode_graph_execution.json.gz")
    capture = shared_trace("amd/mi300x_vllm_decode_graph_capture.json.gz")
    with (TRACES / "amd/mi300x_vllm_decode.tracelens_csvs/ops_summary.csv").open() as f:
        oracle = {row["name"]: row for row in csv.DictReader(f)}
    tables = tracekit.load(replay, graph_captures=[capture])
    by_op = dict(analyses.run(tables, "op_categories").select("category", "direct_kernel_ms").rows())
    moe = oracle["vllm::moe_forward"]
    assert moe["Categories"] == "['other']"
    assert by_op["MoE"] * 1e3 == pytest.approx(float(moe["total_subtree_kernel_time_sum"]), abs=1)
    assert by_op["MoE"] / sum(by_op.values()) > 0.6
