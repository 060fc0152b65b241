"""The ground truth of a synthetic capture: exact numbers counted during the simulation, with their definitions,
and reading back the ground_truth.json written beside the traces."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable
from dataclasses import asdict
from pathlib import Path

from tracekit.errors import InputError
from tracekit.synth.job import BASE_TIME_NS
from tracekit.synth.simulation import RankSim

GROUND_TRUTH_FILE = "ground_truth.json"


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
        "library_collectives": [{**c, "start": epoch(c["start"])} for c in sim.library_kernels],
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
    "gpu_timeline": "GPU ops with a launcher; communication = the kernels the simulation made as communication "
                    "(NCCL collectives; with expert_parallel also library_collectives), memcpy = memcpy ops, "
                    "computation = other kernels and memsets; each the union of its intervals; exposed_comm = "
                    "communication minus computation; exposed_memcpy = memcpy minus computation minus communication; "
                    "busy = union of all; total = last end - first start; idle = total - busy",
    "launch_pairs": "runtime calls linked by correlation to a GPU op (kernel, memcpy, memset)",
    "collectives": "NCCL kernels in order; start/dur of the kernel; bytes = In msg nelems * 4 (float32)",
    "library_collectives": "with expert_parallel: DeepEP dispatch/combine (collective all_to_all) and vLLM custom "
                           "all-reduce (all_reduce) kernels in order, with no NCCL args; start/dur of the kernel",
    "syncs": "synchronising runtime calls and their cuda_sync events: wait_on_stream = the stream whose work is "
             "waited for (-1: every stream); signal_correlation = last GPU op on that stream (for Context Sync: on the "
             "stream finishing last) when the event was recorded or the call made; "
             "released_correlation (Stream Wait Event) = first GPU op enqueued on the waiting stream after the wait; "
             "gpu_done_at = when what is waited for completes",
}


def read_ground_truth(out_dir: str | Path) -> dict:
    """The ground truth `generate` wrote into out_dir."""
    path = Path(out_dir) / GROUND_TRUTH_FILE
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise InputError(f"{path}: no such file (not a tracekit synth output)") from None
