"""Kineto trace events for hand-built traces: a launch call on host thread (1, 1) and the kernel it launched on
device 0, stream 7 (named k<correlation>), in µs."""

from __future__ import annotations


def launch(ts, correlation):
    return {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": ts, "dur": 1,
            "args": {"correlation": correlation}}


def kernel(ts, dur, correlation):
    return {"ph": "X", "cat": "kernel", "name": f"k{correlation}", "pid": 0, "tid": 7, "ts": ts, "dur": dur,
            "args": {"device": 0, "stream": 7, "correlation": correlation}}
