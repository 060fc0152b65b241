"""One rank's discrete-event simulation (host thread, three CUDA streams, the truth counted as events are made),
and all ranks run together, meeting at each collective."""

from __future__ import annotations

import json
import math
import random
from collections.abc import Iterator
from dataclasses import dataclass
from typing import NamedTuple

from tracekit.errors import InputError, closest_names
from tracekit.synth.job import (
    CBID,
    COMM,
    COMPUTE,
    COPY,
    DATALOADER_NS,
    F32,
    FIRST_CORRELATION,
    FIRST_STEP,
    GPU_CATEGORY,
    GPUS_PER_NODE,
    HOST_PID,
    K_FILL,
    LIBRARY_KERNELS,
    LAUNCH_LATENCY,
    LAUNCHER,
    MEMCPY_D2H,
    NO_STREAM,
    PCIE_BYTES_PER_NS,
    RUNTIME_COST,
    SIBLING_GAP,
    STEP_GAP,
    TRACE_START_NS,
    WAKE_AFTER_SYNC,
    Collective,
    GpuWork,
    JobPlan,
    Model,
    Op,
    SynthConfig,
    op_args,
)

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
        self.drift = config.drift_factor
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
        self.library_kernels: list[dict] = []  # --expert-parallel: DeepEP and custom all-reduce kernels
        self.syncs: list[dict] = []
        self.steps: list[dict] = []
        self.queued: list[dict] = []
        self.step_gpu: list[int] | None = None  # [first start, last end] of the current step's GPU ops

    # ----------------------------------------------------------------- time

    def jitter(self, ns: int) -> int:
        """A duration (a positive int) with the capture's noise applied; at least 1 ns so nesting stays strict."""
        if not self.noise and self.drift == 1.0:
            return ns
        factor = self.drift * (self.noise_rng.lognormvariate(0.0, self.noise) if self.noise else 1.0)
        return max(1, round(ns * factor))

    def slow_factor(self, name: str) -> float:
        factor = self.slow_factor_of.get(name)
        if factor is None:
            factor = math.prod(f for part, f in self.config.slow_kernels.items() if part.lower() in name.lower())
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
                launched: bool = True, communication: bool = False) -> None:
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
        # by construction, not by name: the truth stays independent of the name rule it checks
        category = "communication" if communication else "memcpy" if kind == "memcpy" else "computation"
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
        self.enqueue("kernel", c.kernel, COMM, ready, end - ready, correlation, static, communication=True)
        self.end(frame)
        self.collectives.append({"collective_name": c.name, "kernel": c.kernel, "correlation": correlation,
                                 "in_nelems": c.in_nelems, "out_nelems": c.out_nelems, "dtype": "Float",
                                 "bytes": c.in_nelems * F32, "start": ready, "dur": end - ready})

    def library_collectives(self, op_name: str, parts: tuple[Collective, ...]) -> Iterator[tuple[Collective, int]]:
        """An op of a communication library (DeepEP, custom all-reduce): its kernels have no NCCL args; each meets
        the other ranks like a collective. Kernels on the communication stream wait for the compute stream."""
        frame = self.begin("cpu_op", op_name, {})
        for c in parts:
            if c.stream == COMM:
                self.stream_wait(COMM, self.event_record(COMPUTE))
            correlation, start, _ = self.runtime_call("cudaLaunchKernel", flow=True)
            ready = max(start + self.jitter(LAUNCH_LATENCY), self.stream_free[c.stream])
            end = yield c, ready
            static = self.plan.kernel(c.kernel, 0, [24, 1, 1], [768, 1, 1], c.stream).args
            self.enqueue("kernel", c.kernel, c.stream, ready, end - ready, correlation, static, communication=True)
            self.library_kernels.append({"op": op_name, "kernel": c.kernel, "collective": LIBRARY_KERNELS[c.name][1],
                                         "correlation": correlation, "start": ready, "dur": end - ready})
        self.end(frame)
        if any(c.stream == COMM for c in parts):
            self.stream_wait(COMPUTE, self.event_record(COMM))

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
            if self.config.expert_parallel:
                for op_name, parts in plan.expert_exchange:
                    yield from self.library_collectives(op_name, parts)
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
        transfer *= config.drift_factor
        end = max(ready for _, ready in arrivals) + max(1, round(transfer))
        arrivals = [send(p, end) for p in programs]
    assert all(a is None for a in arrivals), "ranks diverged"
    kernels = {name for sim in sims for name in sim.slow_factor_of}
    for part, factor in config.slow_kernels.items():
        if not any(part.lower() in name.lower() for name in kernels):
            raise InputError(f"--slow-kernel {part}={factor:g}: no kernel of the job has {part!r} in its name; "
                             f"closest names: {closest_names(part, kernels)}")
    return sims


def send(program: Iterator, value):
    try:
        return program.send(value)
    except StopIteration:
        return None
