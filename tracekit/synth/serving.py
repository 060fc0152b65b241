"""Synthetic traces of an LLM serving engine (vLLM or SGLang), with exact ground truth: iterations marked as the
engines mark them (prefill, decode and mixed, with batch sizes and tokens), decode iterations replayed from CUDA
graphs (their kernels share the graph launch's correlation), and who owns every GPU op.

Per iteration, on the engine's host thread: the iteration's annotation (vLLM's `execute_T_context_C(..)_generation_
G(..)` or SGLang's `step[DECODE bs=B]` / `step[EXTEND bs=B toks=T]`), inside it the engine's Python frames, an input
copy (aten::copy_), then the forward: eager ops for prefill and mixed iterations, a graph replay for decode ones
(inside torch's `replay` Python frame; or, with `bare`, a capture without Python stacks, directly under the
iteration annotation), and for mixed iterations a kernel
launched under a `sample_tokens` annotation with no op. Work queued before the profiling window (no launch call)
runs during the first iteration. The ownership rules these exercise are kernel_by_op's.

With `graph_capture` (hip or cuda) each rank also gets the trace of capturing its decode graphs
(`capture/rank{r}.json`): per graph a capture region (StreamBeginCapture .. EndCapture) under which every kernel's
launch call sits in its op, inside `nn.Module: DecoderLayer_{i}` and `nn.Module: LlamaForCausalLM_0` frames; hip
launch calls name their kernel (`args.kernel`), cuda ones do not. `capture_mismatch` makes the capture disagree with
the replays: missing (the capture lacks each graph's last launch) or extra (one more launch, a memset, that no replay
runs). The ground truth then also says who owns every GPU op with the capture read (`owners_with_capture`).
"""

from __future__ import annotations

import random
from collections import defaultdict
from dataclasses import asdict, dataclass
from itertools import groupby

from tracekit.errors import InputError
from tracekit.synth.job import BASE_TIME_NS, FIRST_CORRELATION, HOST_PID, TRACE_START_NS
from tracekit.synth.writer import CAPTURE_DIR, Synthesis, device_properties

ENGINES = ("vllm", "sglang")
GRAPH_PLACES = ("frame", "bare")
CAPTURES = ("", "hip", "cuda")  # no capture trace; launch calls that name their kernel (HIP); that do not (CUDA)
MISMATCHES = ("", "missing", "extra")
STREAM = 7
LAUNCH_LATENCY = 6_000
GAP = 700  # host time between consecutive calls
GEMM_SMALL = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize64x64x64_warpgroupsize1x1x1_execute_segment_k_off"
GEMM_LARGE = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off"
ATTENTION = "void flash::flash_fwd_splitkv_kernel<Flash_fwd_kernel_traits<128, 64, 128, 4, false, false, cutlass::bfloat16_t>, true>"
RMSNORM = "void vllm::rms_norm_kernel<c10::BFloat16>(c10::BFloat16*, c10::BFloat16 const*, c10::BFloat16 const*, float, int, int)"
ACT = "void vllm::act_and_mul_kernel<c10::BFloat16, &vllm::silu_kernel<c10::BFloat16>, true>(c10::BFloat16*, c10::BFloat16 const*, int)"
ARGMAX = "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::ArgMaxOps<float>, unsigned int, long, 4> >"
SAMPLER = "void vllm::sampler_kernel<float>(float const*, long*, int)"
MEMCPY = "Memcpy HtoD (Pinned -> Device)"
LAYER = ((RMSNORM, "_C::rms_norm"), ("GEMM", "aten::mm"), (ATTENTION, "vllm::unified_attention"), ("GEMM", "aten::mm"),
         (ACT, "_C::silu_and_mul"), ("GEMM", "aten::mm"))
# With moe: each layer's MLP is a mixture of experts, as the engine runs it: (kernel, op) per launch, consecutive
# launches of one op being one call. vLLM runs the layer in one op (vllm::moe_forward); SGLang in its routing, align
# and fused-experts ops. Routing, sorting and the combine of expert outputs are MoE kernels; the Triton
# fused_moe_kernel runs the expert GEMMs (by construction: MOE_OWN_KERNELS and EXPERT_GEMM, not by name).
EXPERT_GEMM = "fused_moe_kernel"
VLLM_TOPK = ("void vllm::moe::topkGatingSoftmax<8, 8, 4, 16, int>(float const*, bool const*, float*, int, int*, int*, "
             "int, int, int)")
VLLM_ALIGN = ("void vllm::moe::moe_align_block_size_kernel<int>(int const*, int*, int*, int*, int, int, int, int, "
              "unsigned long, int*)")
VLLM_SUM = "void vllm::moe::moe_sum_kernel<c10::BFloat16, 8>(c10::BFloat16*, c10::BFloat16 const*, int)"
SGLANG_TOPK = ("void topkGatingSoftmax<8, 8, 4, 16, int>(float const*, bool const*, float*, int, int*, int, int, int, "
               "bool)")
SGLANG_ALIGN = ("void moe_align_block_size_kernel<int>(int const*, int*, int*, int*, int, int, int, int, "
                "unsigned long, int*)")
SGLANG_SORT = "void count_and_sort_expert_tokens_kernel<int>(int const*, int*, int*, unsigned long)"
SGLANG_SUM = ("void moe_sum_reduce_warp_per_token_vec_kernel<c10::BFloat16, 8>(c10::BFloat16 const*, c10::BFloat16*, "
              "int)")
MOE_BLOCK = {"vllm": tuple((kernel, "vllm::moe_forward")
                           for kernel in (VLLM_TOPK, VLLM_ALIGN, EXPERT_GEMM, ACT, EXPERT_GEMM, VLLM_SUM)),
             "sglang": ((SGLANG_TOPK, "sgl_kernel::topk_softmax"), (SGLANG_ALIGN, "sgl_kernel::moe_align_block_size"),
                        (SGLANG_SORT, "sgl_kernel::moe_align_block_size"),
                        (EXPERT_GEMM, "sglang::inplace_fused_experts"), (EXPERT_GEMM, "sglang::inplace_fused_experts"),
                        (SGLANG_SUM, "sglang::inplace_fused_experts"))}
MOE_OWN_KERNELS = {VLLM_TOPK, VLLM_ALIGN, VLLM_SUM, SGLANG_TOPK, SGLANG_ALIGN, SGLANG_SORT, SGLANG_SUM}
MOE_OPS = {op for block in MOE_BLOCK.values() for _, op in block}
FRAMES = {"vllm": ["vllm/v1/engine/core.py(236): step", "vllm/v1/worker/gpu_worker.py(447): execute_model",
                   "vllm/v1/worker/gpu_model_runner.py(2176): execute_model"],
          "sglang": ["sglang/srt/managers/scheduler.py(812): event_loop_normal",
                     "sglang/srt/managers/scheduler.py(1712): run_batch"]}
REPLAY_FRAME = "torch/cuda/graphs.py(139): replay"


@dataclass(frozen=True)
class ServingConfig:
    """Everything that determines a synthetic serving capture. Equal configs give byte-identical files."""

    engine: str = "vllm"
    ranks: int = 1
    iterations: int = 12
    layers: int = 2
    seed: int = 0
    graph_launch: str = "frame"  # the decode graph's launch: inside torch's replay frame, or bare
    queued_kernels: int = 0
    graph_capture: str = ""  # also write the trace of capturing the decode graphs: hip or cuda launch calls
    capture_mismatch: str = ""  # the capture lacks each graph's last launch (missing) or has one more (extra)
    moe: bool = False  # each layer's MLP is a mixture of experts (MOE_BLOCK)
    merged: bool = False  # the writer's option (never set: one rank file per rank)
    gzip: bool = False

    def layer(self) -> tuple[tuple[str, str], ...]:
        """One decoder layer's launches: (kernel, op) each, consecutive launches of one op being one call."""
        return LAYER[:4] + MOE_BLOCK[self.engine] if self.moe else LAYER

    def check(self) -> None:
        if self.engine not in ENGINES:
            raise InputError(f"--serving {self.engine}: not one of {', '.join(ENGINES)}")
        if self.graph_launch not in GRAPH_PLACES:
            raise InputError(f"--graph-launch {self.graph_launch}: not one of {', '.join(GRAPH_PLACES)}")
        if self.graph_capture not in CAPTURES or self.capture_mismatch not in MISMATCHES:
            raise InputError(f"--with-capture {self.graph_capture} / --capture-mismatch {self.capture_mismatch}: not "
                             f"one of hip, cuda / missing, extra")
        if self.capture_mismatch and not self.graph_capture:
            raise InputError("--capture-mismatch: needs --with-capture")
        if self.ranks < 1 or self.iterations < 1 or self.layers < 1 or self.queued_kernels < 0:
            raise InputError("--ranks, --steps (iterations) and --scale (layers) must be at least 1, "
                             "--queued-kernels at least 0")


@dataclass
class Iteration:
    phase: str
    context: int  # prefill requests
    context_tokens: int
    generation: int  # decode requests

    @property
    def batch_size(self) -> int:
        return self.context + self.generation

    @property
    def tokens(self) -> int:
        return self.context_tokens + self.generation

    def marker(self, engine: str) -> str:
        if engine == "sglang":
            if self.phase == "decode":
                return f"step[DECODE bs={self.generation}]"
            return f"step[EXTEND bs={self.context} toks={self.context_tokens}]"
        context = f"sq{self.context_tokens}sk{self.context_tokens}sqsq{self.context_tokens * 64}sqsk{self.context_tokens * 64}"
        generation = f"sq{self.generation}sk{self.generation * 700}sqsq{self.generation}sqsk{self.generation * 700}"
        return f"execute_{self.tokens}_context_{self.context}({context})_generation_{self.generation}({generation})"

    def sglang_tokens(self) -> int | None:
        return None if self.phase == "decode" else self.context_tokens


def plan_iterations(config: ServingConfig, rng: random.Random) -> list[Iteration]:
    """The first iteration prefills; then mostly decode, now and then a prefill (and with vLLM a mixed one)."""
    phases = ["prefill"] + [rng.choice(["decode"] * 5 + ["prefill"] + (["mixed"] if config.engine == "vllm" else []))
                            for _ in range(config.iterations - 1)]
    out = []
    for phase in phases:
        context = rng.randint(1, 6) if phase != "decode" else 0
        generation = rng.randint(8, 64) if phase != "prefill" else 0
        out.append(Iteration(phase, context, sum(rng.randint(32, 512) for _ in range(context)), generation))
    return out


class ServingSim:
    """One rank's host thread and GPU stream, in integer ns, with every GPU op's owner counted as it is made."""

    def __init__(self, config: ServingConfig, rank: int):
        self.config, self.rank = config, rank
        self.rng = random.Random(config.seed * 7919 + rank)
        self.pid, self.tid = HOST_PID + 1117 * rank, HOST_PID + 1117 * rank + 1
        self.now = TRACE_START_NS
        self.gpu_free = TRACE_START_NS
        self.correlation = FIRST_CORRELATION
        self.host: list[dict] = []
        self.gpu: list[dict] = []
        self.owners: dict[tuple[str, str | None], int] = defaultdict(int)  # (attribution, owner) → ns
        self.owners_with_capture: dict[tuple[str, str | None], int] = defaultdict(int)  # the same, capture read
        self.unmatched = 0  # replayed GPU ops the capture has no launch for
        self.moe_kernel_ns = {"moe": 0, "expert_gemm": 0}  # GPU time of the MoE block's own kernels, its expert GEMMs
        self.graphs: dict[tuple[str, ...], int] = {}  # a graph's kernel names → its number, by first launch
        self.iterations: list[dict] = []
        self.iteration_gpu: list[int] = []

    def event(self, cat: str, name: str, start: int, dur: int, args: dict | None = None) -> dict:
        e = {"ph": "X", "cat": cat, "name": name, "pid": self.pid, "tid": self.tid, "ts": start / 1000,
             "dur": dur / 1000, "args": args or {}}
        self.host.append(e)
        return e

    def span(self, cat: str, name: str, body, args: dict | None = None) -> None:
        start = self.now
        self.now += GAP
        body()
        self.now += GAP
        self.event(cat, name, start, self.now - start, args)
        self.now += GAP

    def gpu_op(self, cat: str, name: str, dur: int, correlation: int, launched_at: int | None) -> int:
        start = max(self.gpu_free, (launched_at or 0) + LAUNCH_LATENCY)
        self.gpu.append({"ph": "X", "cat": cat, "name": name, "pid": 0, "tid": STREAM, "ts": start / 1000,
                         "dur": dur / 1000, "args": {"device": 0, "stream": STREAM, "correlation": correlation,
                                                     "context": 1}})
        self.gpu_free = start + dur
        if launched_at is not None:
            self.iteration_gpu.extend([start, start + dur])
        return dur

    def launch(self, runtime: str, ops: list[tuple[str, str, int]], owner: tuple[str, str | None],
               captured: list[tuple[str, str | None]] | None = None) -> None:
        """A runtime call launching `ops` (cat, name, ns) with one correlation, all owned by `owner`; CAPTURED: each
        op's owner when the graph's capture is read (default: `owner`)."""
        self.correlation += 1
        start, dur = self.now, 4_000
        self.event("cuda_runtime", runtime, start, dur, {"correlation": self.correlation, "cbid": 211})
        self.host.append({"ph": "s", "id": self.correlation, "pid": self.pid, "tid": self.tid, "ts": start / 1000,
                          "cat": "ac2g", "name": "ac2g"})
        for (cat, name, ns), with_capture in zip(ops, captured or [owner] * len(ops)):
            self.owners[owner] += self.gpu_op(cat, name, ns, self.correlation, start)
            self.owners_with_capture[with_capture] += ns
            if name in MOE_OWN_KERNELS or name == EXPERT_GEMM:
                self.moe_kernel_ns["moe" if name in MOE_OWN_KERNELS else "expert_gemm"] += ns
        self.now += dur

    def kernel_ns(self, name: str, tokens: int) -> int:
        base = {ATTENTION: 9_000, RMSNORM: 2_000, ACT: 3_000, ARGMAX: 4_000, SAMPLER: 5_000}.get(
            name, 3_000 if name in MOE_OWN_KERNELS else 12_000)
        return (base + tokens * (20 if name in (GEMM_SMALL, GEMM_LARGE, EXPERT_GEMM) else 4)
                + self.rng.randint(0, 999))

    def op(self, op_name: str, kernels: list[str], tokens: int) -> None:
        """One call of OP_NAME launching KERNELS, each with its own launch call."""
        def body():
            for kernel in kernels:
                self.launch("cudaLaunchKernel", [("kernel", kernel, self.kernel_ns(kernel, tokens))], ("op", op_name))
        self.span("cpu_op", op_name, body)

    def forward_eager(self, it: Iteration) -> None:
        gemm = GEMM_LARGE if it.tokens > 32 else GEMM_SMALL
        for _ in range(self.config.layers):
            for op_name, launches in groupby(self.config.layer(), key=lambda launch: launch[1]):
                self.op(op_name, [gemm if kernel == "GEMM" else kernel for kernel, _ in launches], it.tokens)

    def replay(self, it: Iteration) -> None:
        gemm = GEMM_LARGE if it.generation > 32 else GEMM_SMALL
        names = tuple(gemm if k == "GEMM" else k for _ in range(self.config.layers) for k, _ in self.config.layer())
        graph = self.graphs.setdefault(names, len(self.graphs) + 1)
        kernels = [("kernel", n, self.kernel_ns(n, it.generation)) for n in names]
        owner = (("python_frame", REPLAY_FRAME) if self.config.graph_launch == "frame"
                 else ("graph_launch", f"cudaGraphLaunch[graph {graph}, {len(names)} kernels]"))
        captured = None
        if self.config.graph_capture:
            ops = [op for _ in range(self.config.layers) for _, op in self.config.layer()]
            captured = [("capture", op) for op in ops]
            if self.config.capture_mismatch == "missing":  # the capture lacks the last launch
                captured[-1] = owner
                self.unmatched += 1
        if self.config.graph_launch == "frame":
            self.span("python_function", REPLAY_FRAME, lambda: self.launch("cudaGraphLaunch", kernels, owner, captured))
        else:
            self.launch("cudaGraphLaunch", kernels, owner, captured)

    def iteration_body(self, it: Iteration) -> None:
        # "bare": a capture without Python stacks, so the graph launch sits under the iteration annotation alone
        frames = FRAMES[self.config.engine] if self.config.graph_launch == "frame" else []

        def nest(depth: int) -> None:
            if depth < len(frames):
                self.span("python_function", frames[depth], lambda: nest(depth + 1))
                return
            self.span("cpu_op", "aten::copy_", lambda: self.launch(
                "cudaMemcpyAsync", [("gpu_memcpy", MEMCPY, 1_500 + 8 * it.batch_size)], ("op", "aten::copy_")))
            if it.phase == "decode":
                self.replay(it)
            else:
                self.forward_eager(it)
            self.op("aten::argmax", [ARGMAX], it.batch_size)
            if it.phase == "mixed":
                self.span("user_annotation", "sample_tokens", lambda: self.launch(
                    "cudaLaunchKernel", [("kernel", SAMPLER, self.kernel_ns(SAMPLER, it.batch_size))],
                    ("annotation", "sample_tokens")))

        nest(0)

    def queue_before_window(self) -> None:
        """Kernels launched before the profiling window: on the GPU during the first iteration, no launch call."""
        start = self.now + 2 * GAP
        for i in range(self.config.queued_kernels):
            ns = 30_000 + 1_000 * i
            self.gpu.append({"ph": "X", "cat": "kernel", "name": GEMM_LARGE, "pid": 0, "tid": STREAM,
                             "ts": start / 1000, "dur": ns / 1000,
                             "args": {"device": 0, "stream": STREAM, "correlation": 1 + i, "context": 1}})
            self.owners[("none", None)] += ns
            start += ns
        self.gpu_free = start

    def run(self, plan: list[Iteration]) -> None:
        for index, it in enumerate(plan):
            if index == 0:
                self.queue_before_window()
            self.iteration_gpu = []
            start = self.now
            name = it.marker(self.config.engine)
            self.span("user_annotation", name, lambda: self.iteration_body(it))
            end = self.host[-1]["ts"] * 1000 + self.host[-1]["dur"] * 1000
            self.iterations.append({
                "step": index + 1, "name": name, "phase": it.phase, "batch_size": it.batch_size,
                "tokens": it.tokens if self.config.engine == "vllm" else it.sglang_tokens(),
                "start_ns": BASE_TIME_NS + start, "end_ns": BASE_TIME_NS + round(end),
                "gpu_start_ns": BASE_TIME_NS + min(self.iteration_gpu),
                "gpu_end_ns": BASE_TIME_NS + max(self.iteration_gpu),
                "holds_queued_work": index == 0 and self.config.queued_kernels > 0})
            self.now = max(self.now, self.gpu_free - 200_000) + 20_000  # the host runs at most 0.2 ms ahead

    def document(self, world: int) -> dict:
        meta = [{"name": "process_name", "ph": "M", "ts": 0, "pid": self.pid, "tid": 0, "args": {"name": "python3"}},
                {"name": "thread_name", "ph": "M", "ts": 0, "pid": self.pid, "tid": self.tid,
                 "args": {"name": "thread 1 (python3)"}},
                {"name": "process_name", "ph": "M", "ts": 0, "pid": 0, "tid": 0, "args": {"name": "python3"}},
                {"name": "thread_name", "ph": "M", "ts": 0, "pid": 0, "tid": STREAM, "args": {"name": f"stream {STREAM}"}}]
        flows = [{"ph": "f", "id": e["args"]["correlation"], "pid": 0, "tid": STREAM, "ts": e["ts"], "cat": "ac2g",
                  "name": "ac2g", "bp": "e"} for e in self.gpu if e["args"]["correlation"] > FIRST_CORRELATION]
        return {"schemaVersion": 1, "deviceProperties": [device_properties(0)],
                "distributedInfo": {"backend": "nccl", "rank": self.rank, "world_size": world},
                "traceEvents": meta + self.host + self.gpu + flows, "traceName": f"rank{self.rank}.json",
                "displayTimeUnit": "ms", "baseTimeNanoseconds": BASE_TIME_NS}

    def truth(self) -> dict:
        truth = {"rank": self.rank, "iterations": self.iterations, **owner_truth(self.owners, ""),
                 "gpu_ns": sum(self.owners.values())}
        if self.config.moe:
            truth["moe"] = {"op_ns": moe_op_ns(self.owners), "kernel_ns": self.moe_kernel_ns["moe"],
                            "expert_gemm_ns": self.moe_kernel_ns["expert_gemm"]}
            if self.config.graph_capture:
                truth["moe"]["op_ns_with_capture"] = moe_op_ns(self.owners_with_capture)
        if self.config.graph_capture:
            truth |= owner_truth(self.owners_with_capture, "_with_capture")
            truth["capture"] = {"file": capture_file_name(self.rank, self.config), "graphs": self.captured_graphs(),
                                "unmatched_gpu_ops": self.unmatched}
        return truth

    def captured_graphs(self) -> list[dict]:
        """What the capture trace holds: per graph (numbered as captured), each launch's kernel, op and module."""
        return [{"graph": number, "launches": capture_launches(names, self.config)}
                for names, number in sorted(self.graphs.items(), key=lambda kv: kv[1])]

    def capture_document(self, world: int) -> dict:
        """The trace of capturing this rank's decode graphs, on its own clock (before the serving trace)."""
        prefix = "hip" if self.config.graph_capture == "hip" else "cuda"
        cap = ServingSim(self.config, self.rank)
        for graph in self.captured_graphs():
            def region(graph=graph):
                cap.runtime(f"{prefix}StreamBeginCapture")
                cap.span("python_function", "nn.Module: LlamaForCausalLM_0", lambda: capture_layers(cap, graph))
                cap.runtime(f"{prefix}StreamEndCapture")
                cap.runtime(f"{prefix}GraphInstantiateWithFlags")
            cap.span("user_annotation", f"capture_graph_{graph['graph']}", region)
        return {**cap.document(world), "traceName": f"capture_rank{self.rank}.json"}

    def runtime(self, name: str, kernel: str | None = None) -> None:
        self.correlation += 1
        args = {"correlation": self.correlation, "cbid": 211} | ({"kernel": kernel} if kernel else {})
        self.event("cuda_runtime", name, self.now, 4_000, args)
        self.now += 4_000 + GAP


def capture_layers(cap: ServingSim, graph: dict) -> None:
    """The capture of one graph: each launch inside its op, the ops inside their layer's module frame."""
    prefix = "hip" if cap.config.graph_capture == "hip" else "cuda"
    by_module: dict[str, list[dict]] = defaultdict(list)
    for launch in graph["launches"]:
        by_module[launch["module"]].append(launch)

    def calls(launches):  # consecutive launches of one op: one call
        for launch in launches:
            call = f"{prefix}MemsetAsync" if launch["kind"] == "memset" else f"{prefix}LaunchKernel"
            cap.runtime(call, launch["kernel"] if prefix == "hip" and launch["kind"] == "kernel" else None)

    for module, launches in by_module.items():
        def ops(launches=launches):
            for op, same in groupby(launches, key=lambda launch: launch["op"]):
                cap.span("cpu_op", op, lambda same=list(same): calls(same),
                         {"Input Dims": [[32, 4096]], "Input type": ["c10::BFloat16"]})
        cap.span("python_function", module, ops)


def capture_launches(names: tuple[str, ...], config: ServingConfig) -> list[dict]:
    """A graph's captured launches (kernel, kind, op, module) for its kernel NAMES, as capture_mismatch has them."""
    ops = [op for _ in range(config.layers) for _, op in config.layer()]
    per_layer = len(config.layer())
    launches = [{"kernel": name, "kind": "kernel", "op": op, "module": f"nn.Module: DecoderLayer_{i // per_layer}"}
                for i, (name, op) in enumerate(zip(names, ops))]
    if config.capture_mismatch == "missing":
        return launches[:-1]
    if config.capture_mismatch == "extra":  # a memset no replay runs
        return launches + [{"kernel": None, "kind": "memset", "op": "aten::zero_",
                            "module": f"nn.Module: DecoderLayer_{config.layers - 1}"}]
    return launches


def capture_file_name(rank: int, config: ServingConfig) -> str:
    return f"{CAPTURE_DIR}/rank{rank}.json" + (".gz" if config.gzip else "")




def moe_op_ns(owners: dict[tuple[str, str | None], int]) -> int:
    """GPU time owned by the MoE block's ops (MOE_OPS), as an op or as a replayed kernel's captured op."""
    return sum(ns for (attribution, owner), ns in owners.items()
               if attribution in ("op", "capture") and owner in MOE_OPS)


def owner_truth(owners: dict[tuple[str, str | None], int], suffix: str) -> dict:
    by_attribution: dict[str, int] = defaultdict(int)
    for (attribution, _), ns in owners.items():
        by_attribution[attribution] += ns
    return {f"owners{suffix}": [{"attribution": a, "owner": o, "ns": ns} for (a, o), ns in sorted(
                owners.items(), key=lambda kv: (kv[0][0], kv[0][1] or ""))],
            f"ns_by_attribution{suffix}": dict(sorted(by_attribution.items()))}


SERVING_DEFINITIONS = {
    "moe": "with --moe: op_ns, the GPU time (ns) owned by the MoE block's ops (vllm::moe_forward; SGLang's "
           "sgl_kernel::topk_softmax, sgl_kernel::moe_align_block_size, sglang::inplace_fused_experts), decode "
           "replays being owned by the replay, not by these ops (op_ns_with_capture: with the capture read, they are); "
           "kernel_ns, the GPU time of the block's routing, sorting and expert-output-combining kernels; "
           "expert_gemm_ns, of its expert GEMMs (fused_moe_kernel)",
    "iterations": "one per iteration annotation, in order: its name, phase, batch_size (sequences), tokens (null "
                  "where the marker does not say: SGLang's DECODE), CPU window (the annotation) and GPU window "
                  "(first start to last end of the GPU ops launched inside it); holds_queued_work: GPU work with no "
                  "launch call runs inside its CPU window",
    "owners_with_capture": "with --with-capture: the owners when the capture (capture/rank{r}.json, read with "
                           "--graph-capture) is read too: a replayed kernel its capture has a launch for is owned by "
                           "(capture, the op it was captured under); the others as in owners",
    "capture": "with --with-capture: the capture file, each captured graph's launches in order (kernel, kind, op, "
               "module: the captured owner of the replayed kernel at that place; kernel names are in the file only "
               "for hip), and unmatched_gpu_ops (replayed kernels with no captured launch: --capture-mismatch missing)",
    "owners": "GPU time (ns) per owner, by kernel_by_op's rules: op (innermost cpu_op of the launch call), "
              "annotation / python_frame (innermost non-marker annotation or frame), graph_launch "
              "(cudaGraphLaunch[graph N, K kernels], graphs numbered by first launch of their kernel-name sequence), "
              "none (no launch call: queued before the window)",
}


def synthesize_serving(config: ServingConfig) -> Synthesis:
    config.check()
    plan_rng = random.Random(config.seed)
    documents, ranks, captures = [], [], {}
    plan = plan_iterations(config, plan_rng)
    for rank in range(config.ranks):
        sim = ServingSim(config, rank)
        sim.run(plan)
        documents.append(sim.document(config.ranks))
        ranks.append(sim.truth())
        if config.graph_capture:
            captures[capture_file_name(rank, config)] = sim.capture_document(config.ranks)
    truth = {"generator": "tracekit synth --serving", "config": asdict(config), "base_time_ns": BASE_TIME_NS,
             "definitions": SERVING_DEFINITIONS, "ranks": ranks}
    return Synthesis(config, None, documents, truth, captures)
