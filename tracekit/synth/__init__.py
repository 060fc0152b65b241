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

Modules: `job` (configuration, the machine's speeds, shapes and op templates), `simulation` (the ranks run
together), `ground_truth` (the exact numbers and their definitions), `writer` (the trace files); `serving` (an LLM
serving engine's iterations and CUDA graph replays instead of training, with their own ground truth).
"""

from tracekit.synth.ground_truth import GROUND_TRUTH_FILE, TRUTH_DEFINITIONS, read_ground_truth
from tracekit.synth.job import K_LAYER_NORM, MERGED_DIR, SynthConfig, parse_slow_kernels
from tracekit.synth.simulation import simulate
from tracekit.synth.serving import ServingConfig, synthesize_serving
from tracekit.synth.writer import Synthesis, generate, synthesize, write, write_json

__all__ = ["GROUND_TRUTH_FILE", "K_LAYER_NORM", "MERGED_DIR", "TRUTH_DEFINITIONS", "ServingConfig", "SynthConfig",
           "Synthesis", "generate", "parse_slow_kernels", "read_ground_truth", "simulate", "synthesize",
           "synthesize_serving", "write", "write_json"]
