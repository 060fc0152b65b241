"""`tracekit synth`: realistic synthetic Kineto traces with exact ground truth.

The traces are those of a data-parallel transformer training job: per step an input copy, a parameter all-gather,
the forward layers on the main thread, the backward on an autograd thread with bucketed gradient all-reduces and a
final reduce-scatter, an optimizer, `loss.item()` and end-of-step synchronisations.

They come from a small discrete-event simulation in integer nanoseconds. The host thread runs ahead; each GPU op
starts when its stream is free, its launch has reached the GPU and the events its stream waits on have completed.
A collective starts on each rank when that rank is ready and ends on every rank at the same moment (the last
rank's start plus the transfer time), so the ranks are simulated together: each rank is a generator that stops at
every collective until the collective's end is known.

The ground truth is counted while the events are made, with the definitions written beside each number, and is
exact: Kineto's fractional microseconds are written with at most three decimals, so they parse back to the same
nanoseconds.
"""

from __future__ import annotations

import gzip
import json
import math
import random
import re
from collections import Counter
from collections.abc import Iterable, Iterator
from contextlib import nullcontext
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import NamedTuple

import msgspec

from tracekit.errors import InputError
from tracekit.output.atomic import created_dir, replacing_files
from tracekit.read.entries import gc_paused

GROUND_TRUTH_FILE = "ground_truth.json"
MERGED_DIR = "merged"  # beside the rank files it would claim their ranks twice in a directory ingest
BASE_TIME_NS = 1_750_000_000_000_000_000  # baseTimeNanoseconds of every rank (Kineto rounds it to seconds)
TRACE_START_NS = 2_000_000_000  # first profiler timestamp, relative to the base time
GPUS_PER_NODE = 8
HOST_PID = 310_000  # rank r's host process id is HOST_PID + 1117 * r; GPU "pids" are device indices
MERGED_PID_STRIDE = 10_000_000  # merged file: rank r's integer pids are shifted by r * stride
FIRST_CORRELATION = 10_000
FIRST_STEP = 0

COMPUTE, COPY, COMM = 7, 13, 22  # CUDA streams: compute, host-to-device copies, NCCL
NO_STREAM = -1

VOCAB = 32_000
LAYERS_PER_BUCKET = 2  # gradient all-reduce bucket size, in layers
BASE_LAYERS = 4  # transformer layers at --scale 1

# Host-side costs (ns) before noise.
RUNTIME_COST = {
    "cudaLaunchKernel": 4_500, "cudaMemcpyAsync": 9_000, "cudaMemsetAsync": 5_000, "cudaEventRecord": 2_500,
    "cudaStreamWaitEvent": 2_000, "cudaStreamSynchronize": 3_000, "cudaEventSynchronize": 3_000,
    "cudaDeviceSynchronize": 4_000,
}
CBID = {
    "cudaLaunchKernel": 211, "cudaMemcpyAsync": 41, "cudaMemsetAsync": 51, "cudaEventRecord": 135,
    "cudaStreamWaitEvent": 147, "cudaStreamSynchronize": 131, "cudaEventSynchronize": 137, "cudaDeviceSynchronize": 165,
}
LAUNCHER = {"kernel": "cudaLaunchKernel", "memcpy": "cudaMemcpyAsync", "memset": "cudaMemsetAsync"}
GPU_CATEGORY = {"kernel": "kernel", "memcpy": "gpu_memcpy", "memset": "gpu_memset"}
SIBLING_GAP = 900  # host time between consecutive calls on a thread
LAUNCH_LATENCY = 6_000  # from a launch call's start to the earliest start of its GPU op
WAKE_AFTER_SYNC = 2_500  # from the GPU finishing to a blocked host call returning
STEP_GAP = 30_000
DATALOADER_NS = (150_000, 450_000)  # per step and rank, drawn from the seed: the source of rank skew

# GPU model (an H100-like device, fp32 with TF32 tensor cores).
PEAK_FLOP_PER_NS = 400_000  # 400 TFLOP/s
DRAM_BYTES_PER_NS = 2_500  # 2.5 TB/s
PCIE_BYTES_PER_NS = 25  # 25 GB/s
NCCL_BUS_BYTES_PER_NS = 100  # 100 GB/s bus bandwidth
NCCL_LATENCY = 12_000
KERNEL_OVERHEAD = 2_000
F32 = 4

NCCL_KERNELS = {
    "allreduce": "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
    "_allgather_base": "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
    "_reduce_scatter_base": "ncclDevKernel_ReduceScatter_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
}


def gemm_kernel(layout: str, batched: bool = False) -> str:
    kind = "batched" if batched else "segment_k_off"
    return (f"sm90_xmma_gemm_f32f32_tf32f32_f32_{layout}_n_tilesize128x128x32_warpgroupsize1x1x1_execute_{kind}"
            f"_kernel__5x_cublas")


def elementwise_kernel(functor: str, arity: int) -> str:
    return (f"void at::native::vectorized_elementwise_kernel<4, {functor}, std::array<char*, {arity}ul> >"
            f"(int, {functor}, std::array<char*, {arity}ul>)")


K_LAYER_NORM = ("void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float, float>"
                "(int, float, float const*, float const*, float const*, float*, float*, float*)")
K_LAYER_NORM_GRAD_INPUT = ("void at::native::(anonymous namespace)::layer_norm_grad_input_kernel_vectorized<float, float>"
                           "(float const*, float const*, float const*, float const*, float const*, float*, int)")
K_LAYER_NORM_GRAD_WEIGHT = ("void at::native::(anonymous namespace)::GammaBetaBackwardCUDAKernel_32x32<float, float>"
                            "(long, long, float const*, float const*, float const*, float const*, float*, float*)")
K_SOFTMAX = ("void (anonymous namespace)::cunn_SoftMaxForward<4, float, float, float, "
             "(anonymous namespace)::SoftMaxForwardEpilogue>(float*, float const*, int)")
K_SOFTMAX_BACKWARD = ("void (anonymous namespace)::cunn_SoftMaxBackward<4, float, float, float, "
                      "(anonymous namespace)::SoftMaxBackwardEpilogue>(float*, float const*, float const*, long)")
K_ADD = elementwise_kernel("at::native::CUDAFunctor_add<float>", 3)
K_RELU = elementwise_kernel("at::native::(anonymous namespace)::clamp_min_scalar_kernel_impl(at::TensorIteratorBase&, "
                            "c10::Scalar)::{lambda()#1}::operator()() const::{lambda()#7}::operator()() const::"
                            "{lambda(float)#1}", 2)
K_RELU_BACKWARD = elementwise_kernel("at::native::(anonymous namespace)::threshold_kernel_impl<float>"
                                     "(at::TensorIteratorBase&, float, float)::{lambda(float, float)#1}", 3)
K_FILL = elementwise_kernel("at::native::FillFunctor<float>", 1)
K_SUM = ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::func_wrapper_t<float, "
         "at::native::sum_functor<float, float, float>::operator()(at::TensorIterator&)::{lambda(float, float)#1}>, "
         "unsigned int, float, 4> >(at::native::ReduceOp<float, at::native::func_wrapper_t<float, "
         "at::native::sum_functor<float, float, float>::operator()(at::TensorIterator&)::{lambda(float, float)#1}>, "
         "unsigned int, float, 4>)")
K_ADAMW = ("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::"
           "TensorListMetadata<4>, at::native::(anonymous namespace)::FusedAdamMathFunctor<float, 4, "
           "(at::native::ADAM_MODE)1, false>, double*, double, double, double, double, double, bool, double*, double*>"
           "(at::native::(anonymous namespace)::TensorListMetadata<4>, at::native::(anonymous namespace)::"
           "FusedAdamMathFunctor<float, 4, (at::native::ADAM_MODE)1, false>, double*, double, double, double, double, "
           "double, bool, double*, double*)")
MEMCPY_H2D = "Memcpy HtoD (Pinned -> Device)"
MEMCPY_D2H = "Memcpy DtoH (Device -> Pinned)"
MEMSET = "Memset (Device)"


# --------------------------------------------------------------------------- configuration


@dataclass(frozen=True)
class SynthConfig:
    """Everything that determines a synthetic capture. Equal configs give byte-identical files."""

    ranks: int = 2
    steps: int = 4
    seed: int = 0  # the job: model shapes, kernel speeds, host costs, rank skew
    scale: float = 1.0  # multiplies the number of layers, hence of ops per step
    noise: float = 0.0  # sigma of the log-normal jitter applied to every duration
    noise_seed: int = 0  # with the same seed, a different capture of the same job
    slow_kernels: dict[str, float] = field(default_factory=dict)  # kernel name substring → duration factor
    queued_kernels: int = 0  # kernels queued before the profiling window (no launch call in the trace)
    merged: bool = False
    gzip: bool = False

    def check(self) -> None:
        if self.ranks < 1 or self.steps < 1:
            raise InputError(f"--ranks {self.ranks} --steps {self.steps}: both must be at least 1")
        if not self.scale > 0:
            raise InputError(f"--scale {self.scale}: must be positive")
        if self.noise < 0:
            raise InputError(f"--noise {self.noise}: must be zero or positive")
        if self.queued_kernels < 0:
            raise InputError(f"--queued-kernels {self.queued_kernels}: must be zero or positive")
        for name, factor in self.slow_kernels.items():
            if not name or not factor > 0:
                raise InputError(f"--slow-kernel {name}={factor}: needs a kernel name and a positive factor")


def parse_slow_kernels(texts: Iterable[str]) -> dict[str, float]:
    """`NAME=FACTOR` options → {name: factor}. NAME may itself contain `=`; the last one separates the factor."""
    slow = {}
    for text in texts:
        name, sep, factor = text.rpartition("=")
        try:
            value = float(factor)
        except ValueError:
            value = None
        if not sep or not name or value is None or not value > 0:
            raise InputError(f"--slow-kernel {text}: expected NAME=FACTOR with a positive number")
        slow[name] = value
    return slow


# --------------------------------------------------------------------------- the job: shapes and op templates


@dataclass(frozen=True)
class Model:
    hidden: int
    seq_len: int
    batch: int
    layers: int

    @property
    def tokens(self) -> int:
        return self.batch * self.seq_len

    @property
    def heads(self) -> int:
        return self.hidden // 64

    @property
    def layer_params(self) -> int:
        h = self.hidden
        return (3 * h * h + 3 * h) + (h * h + h) + (4 * h * h + 4 * h) + 4 * h * h + 2 * 2 * h

    @classmethod
    def from_seed(cls, seed: int, scale: float) -> Model:
        pick = random.Random(f"{seed}:model")
        return cls(hidden=pick.choice([768, 1024, 1280]), seq_len=pick.choice([512, 1024]), batch=pick.choice([4, 8]),
                   layers=max(1, round(BASE_LAYERS * scale)))


@dataclass(frozen=True, eq=False)
class GpuWork:
    """One GPU op a launch call enqueues."""

    kind: str  # kernel, memcpy, memset
    name: str
    stream: int
    dur: int  # ns, before slow-down and noise
    args: dict  # static args (grid, block, bytes...)


@dataclass(frozen=True, eq=False)
class Op:
    """A host op template: its args, and what it runs, in order (nested ops and GPU work)."""

    name: str
    args: dict
    children: tuple = ()
    backward: Op | None = None  # the autograd node (XBackward0) the op records, run by the backward pass
    flops: int = 0  # 2·M·N·K (·batch) for GEMMs, else 0


@dataclass(frozen=True)
class Collective:
    name: str  # the `Collective name` arg
    in_nelems: int
    out_nelems: int

    @property
    def kernel(self) -> str:
        return NCCL_KERNELS[self.name]

    def transfer_ns(self, world: int) -> int:
        """Ring algorithm time once every rank has arrived."""
        if self.name == "allreduce":
            moved = 2 * (world - 1) * self.in_nelems * F32 // world
        else:
            moved = (world - 1) * max(self.in_nelems, self.out_nelems) * F32 // world
        return NCCL_LATENCY + moved // NCCL_BUS_BYTES_PER_NS


class JobPlan:
    """The op templates of one step, built once from the model; every rank runs the same plan."""

    def __init__(self, model: Model, seed: int, world: int):
        self.model, self.seed = model, seed
        m = model
        t, h, s, nh = m.tokens, m.hidden, m.seq_len, m.heads
        bh = m.batch * nh

        def elementwise(name, numel, tensors):
            """A memory-bound kernel reading or writing `tensors` tensors of `numel` floats."""
            nbytes = numel * F32 * tensors
            dur = KERNEL_OVERHEAD + round(nbytes / (DRAM_BYTES_PER_NS * self.efficiency(name, 0.6, 0.9)))
            blocks = max(1, min(numel // 512, 65_535 * 4))
            return self.kernel(name, dur, [blocks, 1, 1], [128, 1, 1], COMPUTE)

        def gemm_work(name, flops, m_, n_):
            dur = KERNEL_OVERHEAD + round(flops / (PEAK_FLOP_PER_NS * self.efficiency(name, 0.45, 0.8)))
            return self.kernel(name, dur, [math.ceil(n_ / 128), math.ceil(m_ / 128), 1], [384, 1, 1], COMPUTE)

        def mm(m_, k_, n_, layout):
            flops = 2 * m_ * n_ * k_
            return Op("aten::mm", op_args([[m_, k_], [k_, n_]], ["float", "float"]),
                      (gemm_work(gemm_kernel(layout), flops, m_, n_),), flops=flops)

        def bmm(b_, m_, k_, n_, layout="tn"):
            flops = 2 * b_ * m_ * n_ * k_
            return Op("aten::bmm", op_args([[b_, m_, k_], [b_, k_, n_]], ["float", "float"]),
                      (gemm_work(gemm_kernel(layout, batched=True), flops, m_, n_ * b_),), flops=flops)

        def transpose(rows, cols):
            return Op("aten::t", op_args([[rows, cols]], ["float"]),
                      (Op("aten::transpose", op_args([[rows, cols], [], []], ["float", "Scalar", "Scalar"], ["", "0", "1"]),
                          (Op("aten::as_strided", op_args([[rows, cols], [], [], []], ["float", "", "", ""])),)),))

        def linear(n_in, n_out):
            flops = 2 * t * n_in * n_out
            addmm_backward = Op("AddmmBackward0", {}, (
                transpose(n_in, n_out), mm(t, n_out, n_in, "nn"), transpose(t, n_out), mm(n_out, t, n_in, "nt"),
                Op("aten::sum", op_args([[t, n_out], [], [], []], ["float", "ScalarList", "Scalar", ""], ["", "[0]", "True", ""]),
                   (elementwise(K_SUM, t * n_out, 1),)),
            ))
            addmm = Op("aten::addmm", op_args([[n_out], [t, n_in], [n_in, n_out], [], []],
                                              ["float", "float", "float", "Scalar", "Scalar"], ["", "", "", "1", "1"]),
                       (gemm_work(gemm_kernel("tn"), flops, t, n_out),), backward=addmm_backward, flops=flops)
            return Op("aten::linear", op_args([[t, n_in], [n_out, n_in], [n_out]], ["float", "float", "float"]),
                      (transpose(n_out, n_in), addmm))

        def linear_no_bias(n_in, n_out):
            flops = 2 * t * n_in * n_out
            backward = Op("MmBackward0", {}, (transpose(n_in, n_out), mm(t, n_out, n_in, "nn"),
                                               transpose(t, n_out), mm(n_out, t, n_in, "nt")))
            matmul = Op("aten::matmul", op_args([[t, n_in], [n_in, n_out]], ["float", "float"]),
                        (Op("aten::mm", op_args([[t, n_in], [n_in, n_out]], ["float", "float"]),
                            (gemm_work(gemm_kernel("tn"), flops, t, n_out),), backward=backward, flops=flops),))
            return Op("aten::linear", op_args([[t, n_in], [n_out, n_in], []], ["float", "float", ""]),
                      (transpose(n_out, n_in), matmul))

        def layer_norm():
            backward = Op("NativeLayerNormBackward0", {}, (
                Op("aten::native_layer_norm_backward",
                   op_args([[t, h], [t, h], [], [t, 1], [t, 1], [h], [h], []],
                           ["float", "float", "ScalarList", "float", "float", "float", "float", "ScalarList"],
                           ["", "", f"[{h}]", "", "", "", "", "[True, True, True]"]),
                   (elementwise(K_LAYER_NORM_GRAD_INPUT, t * h, 3), elementwise(K_LAYER_NORM_GRAD_WEIGHT, t * h, 2))),
            ))
            native = Op("aten::native_layer_norm",
                        op_args([[t, h], [], [h], [h], []], ["float", "ScalarList", "float", "float", "Scalar"],
                                ["", f"[{h}]", "", "", "1e-05"]),
                        (elementwise(K_LAYER_NORM, t * h, 2),), backward=backward)
            return Op("aten::layer_norm",
                      op_args([[t, h], [], [h], [h], [], []], ["float", "ScalarList", "float", "float", "Scalar", "Scalar"],
                              ["", f"[{h}]", "", "", "1e-05", "True"]),
                      (native,))

        def residual_add():
            return Op("aten::add_", op_args([[t, h], [t, h], []], ["float", "float", "Scalar"], ["", "", "1"]),
                      (elementwise(K_ADD, t * h, 3),), backward=Op("AddBackward0", {}))

        def attention_scores():
            op = bmm(bh, s, 64, s)
            return Op(op.name, op.args, op.children, flops=op.flops, backward=Op("BmmBackward0", {}, (
                bmm(bh, s, s, 64, "nn"), bmm(bh, 64, s, s, "nt"))))

        def attention_context():
            op = bmm(bh, s, s, 64)
            return Op(op.name, op.args, op.children, flops=op.flops, backward=Op("BmmBackward0", {}, (
                bmm(bh, s, 64, s, "nn"), bmm(bh, s, s, 64, "nt"))))

        def softmax():
            backward = Op("SoftmaxBackward0", {}, (
                Op("aten::_softmax_backward_data", op_args([[bh, s, s], [bh, s, s], [], []],
                                                           ["float", "float", "Scalar", "Scalar"], ["", "", "-1", "6"]),
                   (elementwise(K_SOFTMAX_BACKWARD, bh * s * s, 3),)),))
            inner = Op("aten::_softmax", op_args([[bh, s, s], [], []], ["float", "Scalar", "Scalar"], ["", "-1", "False"]),
                       (elementwise(K_SOFTMAX, bh * s * s, 2),), backward=backward)
            return Op("aten::softmax", op_args([[bh, s, s], [], []], ["float", "Scalar", ""], ["", "-1", ""]), (inner,))

        def relu():
            backward = Op("ReluBackward0", {}, (
                Op("aten::threshold_backward", op_args([[t, 4 * h], [t, 4 * h], []], ["float", "float", "Scalar"], ["", "", "0"]),
                   (elementwise(K_RELU_BACKWARD, t * 4 * h, 3),)),))
            return Op("aten::relu", op_args([[t, 4 * h]], ["float"]),
                      (Op("aten::clamp_min", op_args([[t, 4 * h], []], ["float", "Scalar"], ["", "0"]),
                          (elementwise(K_RELU, t * 4 * h, 2),)),), backward=backward)

        self.layer = (layer_norm(), linear(h, 3 * h), attention_scores(), softmax(), attention_context(), linear(h, h),
                      residual_add(), layer_norm(), linear(h, 4 * h), relu(), linear_no_bias(4 * h, h), residual_add())
        self.loss = Op("aten::sum", op_args([[t, h]], ["float"]), (elementwise(K_SUM, t * h, 1),),
                       backward=Op("SumBackward0", {}, (Op("aten::expand", op_args([[], [], []], ["float", "ScalarList", "Scalar"])),)))

        input_bytes = t * F32 * 2  # a batch of token ids and targets
        self.input_copy = Op("aten::to", op_args([[t, 2], [], [], [], []], ["float", "Scalar", "Scalar", "Scalar", ""]), (
            Op("aten::_to_copy", op_args([[t, 2], [], [], [], [], []], ["float", "Scalar", "", "", "", "Scalar"]), (
                Op("aten::copy_", op_args([[t, 2], [t, 2], []], ["float", "float", "Scalar"], ["", "", "True"]), (
                    self.transfer("memcpy", MEMCPY_H2D, input_bytes, PCIE_BYTES_PER_NS, COPY),)),)),))
        self.adamw = Op("aten::_fused_adamw_", op_args([[]] * 4, ["TensorList"] * 4), (
            elementwise(K_ADAMW, m.layer_params, 8),))
        self.bucket_layers = [list(range(b, min(b + LAYERS_PER_BUCKET, m.layers)))
                              for b in range(0, m.layers, LAYERS_PER_BUCKET)]
        self.zero_grads = [Op("aten::zero_", op_args([[len(b) * m.layer_params]], ["float"]), (
            self.transfer("memset", MEMSET, len(b) * m.layer_params * F32, DRAM_BYTES_PER_NS, COMPUTE),))
            for b in self.bucket_layers]
        embedding = VOCAB * h
        self.param_allgather = Collective("_allgather_base", math.ceil(embedding / world), embedding)
        self.grad_allreduces = [Collective("allreduce", len(b) * m.layer_params, len(b) * m.layer_params)
                                for b in self.bucket_layers]
        self.embedding_reduce_scatter = Collective("_reduce_scatter_base", embedding, math.ceil(embedding / world))

    def efficiency(self, name: str, low: float, high: float) -> float:
        """How close a kernel gets to the device's peak: a property of the kernel, fixed by the seed."""
        return random.Random(f"{self.seed}:{name}").uniform(low, high)

    def kernel(self, name, dur, grid, block, stream) -> GpuWork:
        blocks, threads = grid[0] * grid[1] * grid[2], block[0] * block[1] * block[2]
        return GpuWork("kernel", name, stream, dur, {
            "registers per thread": 64, "shared memory": 0 if threads <= 128 else 98_304,
            "blocks per SM": round(blocks / 132, 6), "warps per SM": round(blocks * threads / 32 / 132, 6),
            "grid": grid, "block": block, "est. achieved occupancy %": 50 if blocks >= 132 else 0,
        })

    @staticmethod
    def transfer(kind, name, nbytes, bytes_per_ns, stream) -> GpuWork:
        return GpuWork(kind, name, stream, 1_000 + nbytes // bytes_per_ns, {"bytes": nbytes})


def op_args(dims: list, types: list, concrete: list | None = None) -> dict:
    return {"Input Dims": dims, "Input type": types, "Concrete Inputs": concrete or [""] * len(dims)}


# --------------------------------------------------------------------------- one rank's simulation


@dataclass
class OpTruth:
    count: int = 0
    direct_kernel_ns: int = 0  # GPU ops whose launch call's innermost enclosing cpu_op is this op
    subtree_kernel_ns: int = 0  # GPU ops launched anywhere inside a call of this op, each counted once per name
    gemm_flops: int = 0  # 2·M·N·K (·batch) summed over instances, GEMM ops only


class Frame(NamedTuple):
    """An open host range (cpu_op or user_annotation) on the current thread."""

    event: dict
    start: int
    external_id: int
    is_cpu_op: bool


class RankSim:
    """One rank's process: a host timeline, three CUDA streams, and the truth counted as events are made."""

    def __init__(self, config: SynthConfig, plan: JobPlan, rank: int):
        self.config, self.plan, self.rank = config, plan, rank
        self.device = rank % GPUS_PER_NODE
        self.pid = HOST_PID + 1117 * rank
        self.main_tid, self.autograd_tid = self.pid, self.pid + 29
        self.host_rng = random.Random(f"{config.seed}:{rank}:host")
        self.noise_rng = random.Random(f"{config.seed}:{config.noise_seed}:{rank}:noise")
        self.noise = config.noise
        self.host: list[dict] = []  # host events and flow starts
        self.gpu: list[dict] = []  # GPU events and flow ends
        self.tid = self.main_tid
        self.now = TRACE_START_NS + self.host_rng.randrange(0, 200_000) + 13_000 * rank
        self.trace_start = self.now
        self.frames: list[Frame] = []
        self.cpu_ops: list[str] = []  # names of the open cpu_ops on the current thread, outermost first
        self.stream_free = {COMPUTE: 0, COPY: 0, COMM: 0}  # when each stream can start its next op
        self.last_on_stream: dict[int, int | None] = {COMPUTE: None, COPY: None, COMM: None}  # correlation
        self.cuda_events: dict[int, tuple[int, int, int | None]] = {}  # record corr → (stream, done at, last op)
        self.awaiting_release: dict[int, list[dict]] = {}  # stream → its Stream Wait Events no GPU op followed yet
        self.next_external_id = 1
        self.next_correlation = FIRST_CORRELATION
        self.next_sequence = 1
        self.next_flow = 1
        self.slow_factor_of: dict[str, float] = {}
        # ground truth (relative ns; converted to epoch ns on output)
        self.ops: dict[str, OpTruth] = {}
        self.kernels: dict[str, list[int]] = {}  # name → [count, total ns]
        self.intervals: dict[str, list[tuple[int, int]]] = {"computation": [], "communication": [], "memcpy": []}
        self.launch_pairs = 0
        self.collectives: list[dict] = []
        self.syncs: list[dict] = []
        self.steps: list[dict] = []
        self.queued: list[dict] = []
        self.step_gpu: list[int] | None = None  # [first start, last end] of the current step's GPU ops

    # ----------------------------------------------------------------- time

    def jitter(self, ns: int) -> int:
        """A duration (a positive int) with the capture's noise applied; at least 1 ns so nesting stays strict."""
        if not self.noise:
            return ns
        return max(1, round(ns * self.noise_rng.lognormvariate(0.0, self.noise)))

    def slow_factor(self, name: str) -> float:
        factor = self.slow_factor_of.get(name)
        if factor is None:
            factor = math.prod(f for part, f in self.config.slow_kernels.items() if part in name)
            self.slow_factor_of[name] = factor
        return factor

    # ----------------------------------------------------------------- host events

    def begin(self, cat: str, name: str, args: dict) -> Frame:
        self.now += self.jitter(SIBLING_GAP)
        external_id = self.next_external_id
        self.next_external_id += 1
        event = {"ph": "X", "cat": cat, "name": name, "pid": self.pid, "tid": self.tid, "ts": self.now / 1000,
                 "dur": 0, "args": {"External id": external_id, "Record function id": external_id, **args}}
        self.host.append(event)
        frame = Frame(event, self.now, external_id, cat == "cpu_op")
        self.frames.append(frame)
        if frame.is_cpu_op:
            self.cpu_ops.append(name)
            truth = self.ops.get(name)
            if truth is None:
                truth = self.ops[name] = OpTruth()
            truth.count += 1
        self.now += self.jitter(1_500 + len(name) * 40)  # entry cost: argument parsing, dispatch
        return frame

    def end(self, frame: Frame) -> None:
        assert self.frames[-1] is frame
        self.now += self.jitter(1_200)
        frame.event["dur"] = (self.now - frame.start) / 1000
        self.frames.pop()
        if frame.is_cpu_op:
            self.cpu_ops.pop()

    def runtime_call(self, name: str, flow: bool, blocks_until: int | None = None) -> tuple[int, int, int]:
        """A CUDA runtime call on the current thread → (correlation, start, duration).

        A blocking call (`blocks_until`) returns shortly after the GPU reaches that time.
        """
        self.now += self.jitter(SIBLING_GAP)
        correlation = self.next_correlation
        self.next_correlation += 1
        start, dur = self.now, self.jitter(RUNTIME_COST[name])
        if blocks_until is not None:
            dur = max(dur, blocks_until + self.jitter(WAKE_AFTER_SYNC) - start)
        self.host.append({"ph": "X", "cat": "cuda_runtime", "name": name, "pid": self.pid, "tid": self.tid,
                          "ts": start / 1000, "dur": dur / 1000,
                          "args": {"External id": self.frames[-1].external_id, "cbid": CBID[name], "correlation": correlation}})
        if flow:
            self.host.append({"ph": "s", "id": correlation, "pid": self.pid, "tid": self.tid, "ts": start / 1000,
                              "cat": "ac2g", "name": "ac2g"})
        self.now += dur
        return correlation, start, dur

    # ----------------------------------------------------------------- GPU work

    def launch(self, work: GpuWork) -> None:
        correlation, start, _ = self.runtime_call(LAUNCHER[work.kind], flow=True)
        gpu_start = max(start + self.jitter(LAUNCH_LATENCY), self.stream_free[work.stream])
        dur = max(1, round(work.dur * self.slow_factor(work.name))) if work.kind == "kernel" else work.dur
        self.enqueue(work.kind, work.name, work.stream, gpu_start, self.jitter(dur), correlation, work.args)

    def enqueue(self, kind: str, name: str, stream: int, start: int, dur: int, correlation: int, static_args: dict,
                launched: bool = True) -> None:
        assert start >= self.stream_free[stream], "GPU ops on one stream must not overlap"
        self.stream_free[stream] = start + dur
        self.last_on_stream[stream] = correlation
        # Work queued before the window has no External id: the op that launched it was not recorded.
        args = {"External id": self.frames[-1].external_id} if launched else {}
        if kind == "kernel":
            args.update({"queued": 0, "device": self.device, "context": 1, "stream": stream, "correlation": correlation})
            args.update(static_args)
        else:
            args.update({"device": self.device, "context": 1, "stream": stream, "correlation": correlation})
            args.update(static_args)
            args["memory bandwidth (GB/s)"] = static_args["bytes"] / dur
        self.gpu.append({"ph": "X", "cat": GPU_CATEGORY[kind], "name": name, "pid": self.device, "tid": stream,
                         "ts": start / 1000, "dur": dur / 1000, "args": args})
        self.gpu.append({"ph": "f", "id": correlation, "pid": self.device, "tid": stream, "ts": start / 1000,
                         "cat": "ac2g", "name": "ac2g", "bp": "e"})
        if kind == "kernel":
            stats = self.kernels.setdefault(name, [0, 0])
            stats[0] += 1
            stats[1] += dur
        if not launched:
            self.queued.append({"name": name, "correlation": correlation, "stream": stream, "start": start, "dur": dur})
            return
        for waiting in self.awaiting_release.pop(stream, ()):
            waiting["released_correlation"] = correlation
        self.launch_pairs += 1
        category = ("communication" if kind == "kernel" and ("nccl" in name.lower() or "rccl" in name.lower())
                    else "memcpy" if kind == "memcpy" else "computation")
        self.intervals[category].append((start, start + dur))
        self.step_gpu = [min(self.step_gpu[0], start), max(self.step_gpu[1], start + dur)] if self.step_gpu else [start, start + dur]
        assert self.cpu_ops, f"{name} launched outside any cpu_op"
        self.ops[self.cpu_ops[-1]].direct_kernel_ns += dur
        for op_name in set(self.cpu_ops):  # once per name, where calls of one name nest
            self.ops[op_name].subtree_kernel_ns += dur

    def queue_before_window(self, count: int) -> None:
        """GPU work launched before the profiler started: present on the GPU, its launch call absent."""
        start = self.trace_start + 20_000
        for i in range(count):
            dur = self.jitter(15_000 + 5_000 * (i % 4))
            self.enqueue("kernel", K_FILL, COMPUTE, start, dur, FIRST_CORRELATION - count + i,
                         self.plan.kernel(K_FILL, 0, [4096, 1, 1], [128, 1, 1], COMPUTE).args, launched=False)
            start += dur + 1_000

    # ----------------------------------------------------------------- synchronisation

    def sync_event(self, kind: str, correlation: int, start: int, dur: int, stream: int, extra: dict) -> None:
        """The `cuda_sync` event CUPTI reports for a synchronising runtime call, with its ac2g flow end."""
        offset = min(1_000, dur // 3)
        ts, length = start + offset, max(0, dur - 2 * offset)
        self.gpu.append({"ph": "X", "cat": "cuda_sync", "name": kind, "pid": self.device, "tid": stream,
                         "ts": ts / 1000, "dur": length / 1000,
                         "args": {"External id": self.frames[-1].external_id, "cuda_sync_kind": kind, **extra,
                                  "stream": stream, "correlation": correlation, "device": self.device, "context": 1}})
        self.gpu.append({"ph": "f", "id": correlation, "pid": self.device, "tid": stream, "ts": ts / 1000,
                         "cat": "ac2g", "name": "ac2g", "bp": "e"})

    def event_record(self, stream: int) -> int:
        """cudaEventRecord: the event completes when the stream's work so far has. Returns its correlation."""
        correlation, start, _ = self.runtime_call("cudaEventRecord", flow=False)
        self.cuda_events[correlation] = (stream, max(self.stream_free[stream], start), self.last_on_stream[stream])
        return correlation

    def stream_wait(self, stream: int, record: int) -> None:
        """cudaStreamWaitEvent: `stream` runs nothing more until the recorded event completes."""
        waited_stream, done, signal = self.cuda_events[record]
        correlation, start, dur = self.runtime_call("cudaStreamWaitEvent", flow=True)
        self.stream_free[stream] = max(self.stream_free[stream], done)
        self.sync_event("Stream Wait Event", correlation, start, dur, stream,
                        {"wait_on_stream": waited_stream, "wait_on_cuda_event_record_corr_id": record,
                         "wait_on_cuda_event_id": record - FIRST_CORRELATION + 1})
        truth = self.sync_truth("Stream Wait Event", "cudaStreamWaitEvent", correlation, start, dur, stream,
                                waited_stream, record, signal, done)
        truth["released_correlation"] = None
        self.awaiting_release.setdefault(stream, []).append(truth)

    def stream_sync(self, stream: int) -> None:
        done = self.stream_free[stream]
        correlation, start, dur = self.runtime_call("cudaStreamSynchronize", flow=True, blocks_until=done)
        self.sync_event("Stream Sync", correlation, start, dur, stream, {})
        self.sync_truth("Stream Sync", "cudaStreamSynchronize", correlation, start, dur, stream, stream, None,
                        self.last_on_stream[stream], done)

    def event_sync(self, record: int) -> None:
        waited_stream, done, signal = self.cuda_events[record]
        correlation, start, dur = self.runtime_call("cudaEventSynchronize", flow=True, blocks_until=done)
        self.sync_event("Event Sync", correlation, start, dur, NO_STREAM,
                        {"wait_on_stream": waited_stream, "wait_on_cuda_event_record_corr_id": record,
                         "wait_on_cuda_event_id": record - FIRST_CORRELATION + 1})
        self.sync_truth("Event Sync", "cudaEventSynchronize", correlation, start, dur, NO_STREAM, waited_stream,
                        record, signal, done)

    def device_sync(self) -> None:
        last_stream = max(self.stream_free, key=lambda s: self.stream_free[s])
        done = self.stream_free[last_stream]
        correlation, start, dur = self.runtime_call("cudaDeviceSynchronize", flow=True, blocks_until=done)
        self.sync_event("Context Sync", correlation, start, dur, NO_STREAM, {})
        self.sync_truth("Context Sync", "cudaDeviceSynchronize", correlation, start, dur, NO_STREAM, NO_STREAM, None,
                        self.last_on_stream[last_stream], done)

    def sync_truth(self, kind, runtime, correlation, start, dur, stream, wait_on_stream, record, signal, done) -> dict:
        truth = {"kind": kind, "runtime": runtime, "correlation": correlation, "runtime_start": start,
                 "runtime_dur": dur, "stream": stream, "wait_on_stream": wait_on_stream,
                 "wait_on_event_record_correlation": record, "signal_correlation": signal, "gpu_done_at": done}
        self.syncs.append(truth)
        return truth

    # ----------------------------------------------------------------- ops

    def run_op(self, op: Op, tape: list | None = None, layer: int = 0, grad_of: tuple[int, int] | None = None) -> None:
        """Run an op template: its nested ops and launches, in order.

        In the forward pass (`tape` given) an op with a backward node gets a sequence number and a fwdbwd flow
        start; in the backward pass the node gets `grad_of` = (sequence number, flow id).
        """
        args = op.args
        autograd = tape is not None and op.backward is not None
        if autograd:
            sequence, flow = self.next_sequence, self.next_flow
            self.next_sequence += 1
            self.next_flow += 1
            args = {**args, "Sequence number": sequence, "Fwd thread id": 0}
        elif grad_of is not None:
            args = {**args, "Sequence number": grad_of[0], "Fwd thread id": 1}
        frame = self.begin("cpu_op", op.name, args)
        if op.flops:
            self.ops[op.name].gemm_flops += op.flops
        if autograd:
            self.host.append({"ph": "s", "id": flow, "pid": self.pid, "tid": self.tid, "ts": frame.start / 1000,
                              "cat": "fwdbwd", "name": "fwdbwd"})
            tape.append((layer, sequence, flow, op.backward))
        elif grad_of is not None:
            self.host.append({"ph": "f", "id": grad_of[1], "pid": self.pid, "tid": self.tid,
                              "ts": frame.start / 1000, "cat": "fwdbwd", "name": "fwdbwd", "bp": "e"})
        for child in op.children:
            if isinstance(child, Op):
                self.run_op(child, tape, layer)
            else:
                self.launch(child)
        self.end(frame)

    def collective(self, c: Collective) -> Iterator[tuple[Collective, int]]:
        """A c10d collective: order after the compute stream, launch on the NCCL stream, wait for the peers.

        Yields (collective, the time this rank's kernel can start) and receives the time it ends on every rank.
        """
        world = self.config.ranks
        pg_args = {"Collective name": c.name, "In msg nelems": c.in_nelems, "Out msg nelems": c.out_nelems,
                   "Group size": world, "dtype": "Float", "In split size": "[]", "Out split size": "[]",
                   "Process Group Name": "0", "Process Group Description": "default_pg",
                   "Process Group Ranks": json.dumps(list(range(world)))}
        frame = self.begin("cpu_op", "record_param_comms", {
            **pg_args, "Rank": self.rank, "Global rank start": 0, "Global rank stride": 1,
            "Input Dims": [[c.in_nelems]], "Input type": ["float"], "Concrete Inputs": [""]})
        self.stream_wait(COMM, self.event_record(COMPUTE))
        correlation, start, _ = self.runtime_call("cudaLaunchKernel", flow=True)
        ready = max(start + self.jitter(LAUNCH_LATENCY), self.stream_free[COMM])
        end = yield c, ready
        static = {**self.plan.kernel(c.kernel, 0, [max(1, world), 1, 1], [512, 1, 1], COMM).args, **pg_args}
        self.enqueue("kernel", c.kernel, COMM, ready, end - ready, correlation, static)
        self.end(frame)
        self.collectives.append({"collective_name": c.name, "kernel": c.kernel, "correlation": correlation,
                                 "in_nelems": c.in_nelems, "out_nelems": c.out_nelems, "dtype": "Float",
                                 "bytes": c.in_nelems * F32, "start": ready, "dur": end - ready})

    # ----------------------------------------------------------------- the program

    def program(self) -> Iterator[tuple[Collective, int]]:
        if self.config.queued_kernels:
            self.queue_before_window(self.config.queued_kernels)
        for index in range(FIRST_STEP, FIRST_STEP + self.config.steps):
            yield from self.step(index)
            self.now += self.jitter(STEP_GAP)

    def step(self, index: int) -> Iterator[tuple[Collective, int]]:
        plan = self.plan
        self.tid = self.main_tid
        self.now += self.host_rng.randrange(*DATALOADER_NS)
        step = self.begin("user_annotation", f"ProfilerStep#{index}", {})
        self.step_gpu = None
        self.run_op(plan.input_copy)
        self.stream_wait(COMPUTE, self.event_record(COPY))
        yield from self.collective(plan.param_allgather)
        self.stream_wait(COMPUTE, self.event_record(COMM))

        tape: list = []
        for layer in range(plan.model.layers):
            for op in plan.layer:
                self.run_op(op, tape, layer)
        self.run_op(plan.loss, tape, plan.model.layers)

        # loss.backward(): the autograd thread runs the backward; the main thread waits for it.
        self.tid = self.autograd_tid
        yield from self.backward(tape)
        self.tid = self.main_tid
        self.stream_wait(COMPUTE, self.event_record(COMM))

        optimizer = self.begin("user_annotation", "Optimizer.step#AdamW.step", {})
        for _ in range(plan.model.layers):
            self.run_op(plan.adamw)
        self.end(optimizer)
        zero_grad = self.begin("user_annotation", "Optimizer.zero_grad#AdamW.zero_grad", {})
        for op in plan.zero_grads:
            self.run_op(op)
        self.end(zero_grad)

        item = self.begin("cpu_op", "aten::item", op_args([[]], ["float"]))
        scalar = self.begin("cpu_op", "aten::_local_scalar_dense", op_args([[]], ["float"]))
        self.launch(plan.transfer("memcpy", MEMCPY_D2H, F32, PCIE_BYTES_PER_NS, COMPUTE))
        self.stream_sync(COMPUTE)
        self.end(scalar)
        self.end(item)
        self.event_sync(self.event_record(COMPUTE))
        self.device_sync()
        self.end(step)
        self.steps.append({"name": f"ProfilerStep#{index}", "start": step.start, "end": self.now,
                           "gpu_start": self.step_gpu[0], "gpu_end": self.step_gpu[1]})
        self.gpu.append({"ph": "X", "cat": "gpu_user_annotation", "name": f"ProfilerStep#{index}", "pid": self.device,
                         "tid": COMPUTE, "ts": self.step_gpu[0] / 1000,
                         "dur": (self.step_gpu[1] - self.step_gpu[0]) / 1000, "args": {"External id": step.external_id}})

    def backward(self, tape: list) -> Iterator[tuple[Collective, int]]:
        """Backward nodes in reverse order; a bucket's gradients are all-reduced as soon as its layers are done."""
        by_layer: dict[int, list] = {}
        for entry in tape:
            by_layer.setdefault(entry[0], []).append(entry)
        buckets = {b[0]: i for i, b in enumerate(self.plan.bucket_layers)}
        self.now += self.jitter(8_000)
        for layer in sorted(by_layer, reverse=True):
            for _, sequence, flow, node in reversed(by_layer[layer]):
                wrapper = self.begin("cpu_op", f"autograd::engine::evaluate_function: {node.name}",
                                     {"Sequence number": sequence, "Fwd thread id": 1})
                self.run_op(node, grad_of=(sequence, flow))
                self.end(wrapper)
            if layer in buckets:
                yield from self.collective(self.plan.grad_allreduces[buckets[layer]])
        yield from self.collective(self.plan.embedding_reduce_scatter)
        self.now += self.jitter(5_000)

    # ----------------------------------------------------------------- output

    def metadata(self) -> list[dict]:
        ts = self.trace_start / 1000

        def meta(name, pid, tid, args):
            return {"name": name, "ph": "M", "ts": ts, "pid": pid, "tid": tid, "args": args}

        rows = [
            meta("process_name", self.pid, 0, {"name": "python3"}),
            meta("process_labels", self.pid, 0, {"labels": "CPU"}),
            meta("process_sort_index", self.pid, 0, {"sort_index": self.pid}),
            meta("process_name", self.device, 0, {"name": "python3"}),
            meta("process_labels", self.device, 0, {"labels": f"GPU {self.device}"}),
            meta("process_sort_index", self.device, 0, {"sort_index": 16_777_216 + self.device}),
        ]
        for tid, label in ((self.main_tid, "python3"), (self.autograd_tid, "pt_autograd_0")):
            rows += [meta("thread_name", self.pid, tid, {"name": f"thread {tid} ({label})"}),
                     meta("thread_sort_index", self.pid, tid, {"sort_index": tid})]
        for stream in (COMPUTE, COPY, COMM):
            rows += [meta("thread_name", self.device, stream, {"name": f"stream {stream} "}),
                     meta("thread_sort_index", self.device, stream, {"sort_index": stream})]
        rows.append(meta("process_sort_index", "Spans", 0, {"sort_index": 536_870_912}))
        return rows

    def entries(self) -> list[dict]:
        """Every traceEvents entry, in Kineto's order: host, GPU, metadata, the profiler's span."""
        end = max(self.now, *self.stream_free.values()) + 10_000
        span = {"ph": "X", "cat": "Trace", "ts": self.trace_start / 1000, "dur": (end - self.trace_start) / 1000,
                "pid": "Spans", "tid": "PyTorch Profiler", "name": "PyTorch Profiler (0)", "args": {"Op count": 0}}
        return self.host + self.gpu + self.metadata() + [span]


# --------------------------------------------------------------------------- all ranks together


def simulate(config: SynthConfig) -> list[RankSim]:
    """Run every rank's program, meeting at each collective: it ends on all ranks when the last arrives + transfer."""
    config.check()
    model = Model.from_seed(config.seed, config.scale)
    plan = JobPlan(model, config.seed, config.ranks)
    sims = [RankSim(config, plan, r) for r in range(config.ranks)]
    comm_noise = random.Random(f"{config.seed}:{config.noise_seed}:comm")
    programs = [sim.program() for sim in sims]
    arrivals = [next(p, None) for p in programs]
    while arrivals[0] is not None:
        assert all(a is not None and a[0] is arrivals[0][0] for a in arrivals), "ranks diverged"
        c = arrivals[0][0]
        transfer = c.transfer_ns(config.ranks) * sims[0].slow_factor(c.kernel)
        if config.noise:
            transfer *= comm_noise.lognormvariate(0.0, config.noise)
        end = max(ready for _, ready in arrivals) + max(1, round(transfer))
        arrivals = [send(p, end) for p in programs]
    assert all(a is None for a in arrivals), "ranks diverged"
    return sims


def send(program: Iterator, value):
    try:
        return program.send(value)
    except StopIteration:
        return None


# --------------------------------------------------------------------------- ground truth


def union_length(intervals: Iterable[tuple[int, int]]) -> int:
    """Total length covered by a set of [start, end) intervals."""
    total, run_start, run_end = 0, None, None
    for start, end in sorted(intervals):
        if run_end is None or start > run_end:
            if run_end is not None:
                total += run_end - run_start
            run_start, run_end = start, end
        else:
            run_end = max(run_end, end)
    if run_end is not None:
        total += run_end - run_start
    return total


def gpu_timeline(intervals: dict[str, list[tuple[int, int]]]) -> dict[str, int]:
    """TraceLens's GPU timeline over GPU ops with a launcher: |A − B| is computed as |A ∪ B| − |B|."""
    comp, comm, memcpy = intervals["computation"], intervals["communication"], intervals["memcpy"]
    every = comp + comm + memcpy
    busy = union_length(every)
    total = max(e for _, e in every) - min(s for s, _ in every) if every else 0
    return {
        "computation_ns": union_length(comp),
        "communication_ns": union_length(comm),
        "memcpy_ns": union_length(memcpy),
        "exposed_comm_ns": union_length(comm + comp) - union_length(comp),
        "exposed_memcpy_ns": busy - union_length(comp + comm),
        "busy_ns": busy,
        "total_ns": total,
        "idle_ns": total - busy,
    }


KIND_OF_CATEGORY = {"cpu_op": "cpu_op", "user_annotation": "user_annotation", "cuda_runtime": "runtime",
                    "kernel": "kernel", "gpu_memcpy": "memcpy", "gpu_memset": "memset", "cuda_sync": "sync",
                    "gpu_user_annotation": "gpu_annotation", "Trace": "trace"}


def rank_truth(sim: RankSim, entries: list[dict]) -> dict:
    def epoch(ns: int) -> int:
        return BASE_TIME_NS + ns

    shape = Counter((e["ph"], e.get("cat")) for e in entries)
    kinds = Counter()
    for (ph, cat), n in shape.items():
        if ph == "X":
            kinds[KIND_OF_CATEGORY[cat]] += n
    return {
        "rank": sim.rank,
        "device": sim.device,
        "trace_entries": len(entries),
        "events_by_kind": dict(sorted(kinds.items())),
        "flows": {f"{cat} {ph}": n for (ph, cat), n in sorted(shape.items()) if ph in ("s", "f")},
        "metadata": shape[("M", None)],
        "steps": [{"name": s["name"], "start_ns": epoch(s["start"]), "end_ns": epoch(s["end"]),
                   "dur_ns": s["end"] - s["start"], "gpu_start_ns": epoch(s["gpu_start"]), "gpu_end_ns": epoch(s["gpu_end"])}
                  for s in sim.steps],
        "ops": {name: asdict(t) for name, t in sorted(sim.ops.items())},
        "kernels": {name: {"count": n, "total_ns": total} for name, (n, total) in sorted(sim.kernels.items())},
        "gpu_timeline": gpu_timeline(sim.intervals),
        "launch_pairs": sim.launch_pairs,
        "collectives": [{**c, "start": epoch(c["start"])} for c in sim.collectives],
        "syncs": [{**s, "runtime_start": epoch(s["runtime_start"]), "gpu_done_at": epoch(s["gpu_done_at"])}
                  for s in sim.syncs],
        "queued_before_window": [{**q, "start": epoch(q["start"])} for q in sim.queued],
    }


TRUTH_DEFINITIONS = {
    "units": "integer nanoseconds; times are epoch ns (baseTimeNanoseconds + the trace's relative time)",
    "events_by_kind": "ph X entries by tracekit kind (cpu_op, user_annotation, runtime, kernel, memcpy, memset, sync, "
                      "gpu_annotation, trace)",
    "flows": "flow endpoints by 'cat ph'",
    "steps": "ProfilerStep#N: CPU window of the user_annotation; GPU window of the GPU ops launched in the step",
    "ops.direct_kernel_ns": "sum of durations of GPU ops (kernels, memcpys, memsets) whose launch call's innermost "
                            "enclosing cpu_op is the op",
    "ops.subtree_kernel_ns": "durations of the GPU ops launched anywhere inside a call of the op, each GPU op "
                             "counted once even where calls of the op nest",
    "ops.gemm_flops": "2*M*N*K (times batch for bmm) of GEMM ops; bias adds not counted",
    "kernels": "every kernel event in the file, including those queued before the window (see queued_before_window)",
    "gpu_timeline": "GPU ops with a launcher; communication = kernels named nccl/rccl, memcpy = memcpy ops, "
                    "computation = other kernels and memsets; each the union of its intervals; exposed_comm = "
                    "communication minus computation; exposed_memcpy = memcpy minus computation minus communication; "
                    "busy = union of all; total = last end - first start; idle = total - busy",
    "launch_pairs": "runtime calls linked by correlation to a GPU op (kernel, memcpy, memset)",
    "collectives": "NCCL kernels in order; start/dur of the kernel; bytes = In msg nelems * 4 (float32)",
    "syncs": "synchronising runtime calls and their cuda_sync events: wait_on_stream = the stream whose work is "
             "waited for (-1: every stream); signal_correlation = last GPU op on that stream (for Context Sync: on the "
             "stream finishing last) when the event was recorded or the call made; "
             "released_correlation (Stream Wait Event) = first GPU op enqueued on the waiting stream after the wait; "
             "gpu_done_at = when what is waited for completes",
}


# --------------------------------------------------------------------------- files


@dataclass(frozen=True)
class Synthesis:
    """Trace documents (one per rank) and their ground truth, in memory."""

    config: SynthConfig
    model: Model
    documents: list[dict]
    ground_truth: dict


def synthesize(config: SynthConfig) -> Synthesis:
    with gc_paused():
        return build_documents(config)


def build_documents(config: SynthConfig) -> Synthesis:
    sims = simulate(config)
    model = sims[0].plan.model
    world = config.ranks
    devices = [device_properties(d) for d in range(min(world, GPUS_PER_NODE))]
    documents, ranks = [], []
    for sim in sims:
        entries = sim.entries()
        documents.append({
            "schemaVersion": 1,
            "deviceProperties": devices,
            "distributedInfo": {"backend": "nccl", "rank": sim.rank, "world_size": world, "pg_count": 1,
                                "pg_config": [{"pg_name": "0", "pg_desc": "default_pg", "backend_config": "cuda:nccl",
                                               "pg_size": world, "ranks": list(range(world))}],
                                "nccl_version": "2.21.5"},
            "record_shapes": 1,
            "cuda_runtime_version": 12040,
            "cuda_driver_version": 12090,
            "traceEvents": entries,
            "traceName": f"rank{sim.rank}.json",
            "displayTimeUnit": "ms",
            "baseTimeNanoseconds": BASE_TIME_NS,
        })
        ranks.append(rank_truth(sim, entries))
    truth = {
        "generator": "tracekit synth",
        "config": asdict(config),
        "model": {**asdict(model), "layer_params": model.layer_params},
        "base_time_ns": BASE_TIME_NS,
        "definitions": TRUTH_DEFINITIONS,
        "ranks": ranks,
    }
    return Synthesis(config, model, documents, truth)


def device_properties(device: int) -> dict:
    return {"id": device, "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 85_018_279_936, "computeMajor": 9,
            "computeMinor": 0, "maxThreadsPerBlock": 1024, "maxThreadsPerMultiprocessor": 2048,
            "regsPerBlock": 65536, "warpSize": 32, "sharedMemPerBlock": 49152, "numSms": 132,
            "regsPerMultiprocessor": 65536, "sharedMemPerBlockOptin": 232448, "sharedMemPerMultiprocessor": 233472}


def merged_document(documents: list[dict]) -> dict:
    """All ranks in one file, TraceFuse style: pids made distinct per rank, `args.rank` on every X event.

    Correlation ids, External ids and flow ids are left as they are, so they collide across ranks.
    """
    entries = []
    for doc in documents:
        rank = doc["distributedInfo"]["rank"]
        for e in doc["traceEvents"]:
            pid = e["pid"]
            e = {**e, "pid": pid + rank * MERGED_PID_STRIDE if isinstance(pid, int) else f"{pid} rank {rank}"}
            if e["ph"] == "X":
                e["args"] = {**e["args"], "rank": rank}
            entries.append(e)
    first = documents[0]
    return {"schemaVersion": 1, "deviceProperties": first["deviceProperties"], "traceEvents": entries,
            "traceName": "merged.json", "displayTimeUnit": "ms", "baseTimeNanoseconds": first["baseTimeNanoseconds"]}


ENCODER = msgspec.json.Encoder()


def write_json(path: Path, document: dict, compress: bool) -> None:
    data = ENCODER.encode(document)
    path.write_bytes(gzip.compress(data, compresslevel=1, mtime=0) if compress else data)


# What a previous `tracekit synth` may have written (a ground truth naming anything else is not believed).
SYNTH_FILE = re.compile(rf"(?:{MERGED_DIR}/merged|rank\d+)\.json(?:\.gz)?")


def previous_outputs(out_dir: Path) -> list[str]:
    """The trace files a previous `tracekit synth` wrote into OUT (none for a new or empty folder); InputError for
    any other non-empty folder."""
    if out_dir.exists() and not out_dir.is_dir():
        raise InputError(f"{out_dir}: exists and is not a directory")
    if not out_dir.is_dir() or not any(out_dir.iterdir()):
        return []
    previous = out_dir / GROUND_TRUTH_FILE
    if not previous.is_file():
        raise InputError(f"{out_dir}: not empty and not a tracekit synth output; refusing to write there")
    try:
        written = json.loads(previous.read_text())["files"]
        if not all(isinstance(name, str) and SYNTH_FILE.fullmatch(name) for name in written):
            raise TypeError
    except (ValueError, KeyError, TypeError):
        raise InputError(f"{previous}: not a tracekit synth ground truth; refusing to overwrite {out_dir}") from None
    return written


def generate(out_dir: str | Path, ranks: int = 2, steps: int = 4, seed: int = 0, *, scale: float = 1.0,
             noise: float = 0.0, noise_seed: int = 0, slow_kernels: dict[str, float] | None = None,
             queued_kernels: int = 0, merged: bool = False, gzip: bool = False) -> list[Path]:
    """Write `rank{r}.json` (`.json.gz` with gzip) per rank, `merged/merged.json` with `merged`, and
    `ground_truth.json`, into out_dir. Returns the trace files written (rank files first)."""
    config = SynthConfig(ranks=ranks, steps=steps, seed=seed, scale=scale, noise=noise, noise_seed=noise_seed,
                         slow_kernels=dict(slow_kernels or {}), queued_kernels=queued_kernels, merged=merged, gzip=gzip)
    return write(synthesize(config), Path(out_dir))


def write(synthesis: Synthesis, out_dir: Path) -> list[Path]:
    """Every file under a temporary name first, renamed into place together (the ground truth last): a failure
    leaves OUT as it was. Files of a previous synth that this one does not write again are removed then."""
    config = synthesis.config
    previous = previous_outputs(out_dir)
    suffix = ".json.gz" if config.gzip else ".json"
    names = [f"rank{doc['distributedInfo']['rank']}{suffix}" for doc in synthesis.documents]
    names += [f"{MERGED_DIR}/merged{suffix}"] if config.merged else []
    paths = [out_dir / name for name in names]
    merged_dir = created_dir(out_dir / MERGED_DIR) if config.merged else nullcontext()
    with (created_dir(out_dir), merged_dir, gc_paused(),
          replacing_files([*paths, out_dir / GROUND_TRUTH_FILE]) as temporary):
        for temp, doc in zip(temporary, synthesis.documents):
            write_json(temp, doc, config.gzip)
        if config.merged:
            write_json(temporary[len(synthesis.documents)], merged_document(synthesis.documents), config.gzip)
        temporary[-1].write_text(json.dumps({**synthesis.ground_truth, "files": names}, indent=1))
    for name in set(previous) - set(names):
        (out_dir / name).unlink(missing_ok=True)
    if not config.merged and (out_dir / MERGED_DIR).is_dir() and not any((out_dir / MERGED_DIR).iterdir()):
        (out_dir / MERGED_DIR).rmdir()
    return paths


def read_ground_truth(out_dir: str | Path) -> dict:
    """The ground truth `generate` wrote into out_dir."""
    path = Path(out_dir) / GROUND_TRUTH_FILE
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise InputError(f"{path}: no such file (not a tracekit synth output)") from None
