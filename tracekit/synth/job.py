"""The synthetic job: its configuration, the machine's speeds and kernel names, the model's shapes and the op
templates of one training step (every rank runs the same plan)."""

from __future__ import annotations

import math
import random
from collections.abc import Iterable
from dataclasses import dataclass, field

from tracekit.errors import InputError

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
# With --expert-parallel: DeepEP-style expert-parallel exchange and a vLLM-style custom all-reduce per layer.
# name → (kernel, the collective it is, its stream). No NCCL args: only the kernel name says what they are.
LIBRARY_KERNELS = {
    "notify_dispatch": ("void deep_ep::intranode::notify_dispatch<8>(int const*, int*, int, int const*, int*, int, "
                        "int, bool const*, int*, int*, int, int, int, void**, int**, int)", "all_to_all", COMM),
    "dispatch": ("void deep_ep::intranode::dispatch<8, 768, 8192>(int4*, float*, long*, float*, int*, int*, int*, "
                 "int4 const*, float const*, long const*, float const*, bool const*, int const*, int, int, int, int, "
                 "int, int, int, void**, int, int, int)", "all_to_all", COMM),
    "combine": ("void deep_ep::intranode::combine<float, 8, 768, 4096>(float*, float*, float const*, float const*, "
                "float const*, int const*, int const*, int const*, int const*, int, int, int, int, void**, int, int, "
                "int, int)", "all_to_all", COMM),
    "custom_all_reduce": ("void vllm::cross_device_reduce_1stage<float, 8>(vllm::RankData*, vllm::RankSignals, "
                          "vllm::Signal*, float*, int, int)", "all_reduce", COMPUTE),
}
NVLINK_BYTES_PER_NS = 300  # custom all-reduce and DeepEP intranode: NVLink, 300 GB/s


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
    drift: float = 0.0  # sigma of a log-normal factor drawn once per capture (noise_seed): run-to-run drift
    slow_kernels: dict[str, float] = field(default_factory=dict)  # kernel name substring → duration factor
    queued_kernels: int = 0  # kernels queued before the profiling window (no launch call in the trace)
    expert_parallel: bool = False  # each forward layer also runs a DeepEP exchange and a custom all-reduce
    merged: bool = False
    gzip: bool = False

    @property
    def drift_factor(self) -> float:
        """The capture's factor on every duration (1 without drift): the same on every rank of the capture, another
        with another noise_seed; how much a whole run is slower or faster than another run of the same job."""
        if not self.drift:
            return 1.0
        return random.Random(f"{self.seed}:{self.noise_seed}:drift").lognormvariate(0.0, self.drift)

    def check(self) -> None:
        if self.ranks < 1 or self.steps < 1:
            raise InputError(f"--ranks {self.ranks} --steps {self.steps}: both must be at least 1")
        if not self.scale > 0:
            raise InputError(f"--scale {self.scale}: must be positive")
        if self.noise < 0:
            raise InputError(f"--noise {self.noise}: must be zero or positive")
        if self.drift < 0:
            raise InputError(f"--drift {self.drift}: must be zero or positive")
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
    name: str  # the `Collective name` arg (NCCL), else a LIBRARY_KERNELS key
    in_nelems: int
    out_nelems: int

    @property
    def kernel(self) -> str:
        return NCCL_KERNELS[self.name] if self.name in NCCL_KERNELS else LIBRARY_KERNELS[self.name][0]

    @property
    def stream(self) -> int:
        return COMM if self.name in NCCL_KERNELS else LIBRARY_KERNELS[self.name][2]

    def transfer_ns(self, world: int) -> int:
        """Ring algorithm time once every rank has arrived (NVLink one-shot for the library kernels)."""
        if self.name not in NCCL_KERNELS:
            return NCCL_LATENCY // 2 + self.in_nelems * F32 // NVLINK_BYTES_PER_NS
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
        # --expert-parallel, after each forward layer: (op name, the collectives it runs in order)
        self.expert_exchange = (
            ("deep_ep::dispatch", (Collective("notify_dispatch", world * 64, world * 64),
                                   Collective("dispatch", t * h, t * h))),
            ("deep_ep::combine", (Collective("combine", t * h, t * h),)),
            ("_C_custom_ar::all_reduce", (Collective("custom_all_reduce", t * h, t * h),)),
        )

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
