"""Synthetic captures as files: Kineto JSON documents per rank (and a merged one), written atomically beside
their ground truth."""

from __future__ import annotations

import gzip
import json
import re
from contextlib import nullcontext
from dataclasses import asdict, dataclass, field
from pathlib import Path

import msgspec

from tracekit.errors import InputError
from tracekit.output.atomic import created_dir, replacing_files
from tracekit.read.entries import gc_paused
from tracekit.synth.ground_truth import GROUND_TRUTH_FILE, TRUTH_DEFINITIONS, rank_truth
from tracekit.synth.job import BASE_TIME_NS, GPUS_PER_NODE, MERGED_DIR, MERGED_PID_STRIDE, Model, SynthConfig
from tracekit.synth.simulation import simulate

CAPTURE_DIR = "capture"  # serving graph captures (tracekit.synth.serving), beside the rank files, not among them

# --------------------------------------------------------------------------- files


@dataclass(frozen=True)
class Synthesis:
    """Trace documents (one per rank) and their ground truth, in memory."""

    config: SynthConfig
    model: Model
    documents: list[dict]
    ground_truth: dict
    captures: dict[str, dict] = field(default_factory=dict)  # relative path → the trace of capturing its graphs


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
SYNTH_FILE = re.compile(rf"(?:{MERGED_DIR}/merged|(?:{CAPTURE_DIR}/)?rank\d+)\.json(?:\.gz)?")


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
             noise: float = 0.0, noise_seed: int = 0, drift: float = 0.0, slow_kernels: dict[str, float] | None = None,
             queued_kernels: int = 0, merged: bool = False, gzip: bool = False,
             expert_parallel: bool = False) -> list[Path]:
    """Write `rank{r}.json` (`.json.gz` with gzip) per rank, `merged/merged.json` with `merged`, and
    `ground_truth.json`, into out_dir. Returns the trace files written (rank files first)."""
    config = SynthConfig(ranks=ranks, steps=steps, seed=seed, scale=scale, noise=noise, noise_seed=noise_seed,
                         drift=drift, slow_kernels=dict(slow_kernels or {}), queued_kernels=queued_kernels,
                         merged=merged, gzip=gzip, expert_parallel=expert_parallel)
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
    names += list(synthesis.captures)
    merged_dir = created_dir(out_dir / MERGED_DIR) if config.merged else nullcontext()
    capture_dir = created_dir(out_dir / CAPTURE_DIR) if synthesis.captures else nullcontext()
    with (created_dir(out_dir), merged_dir, capture_dir, gc_paused(),
          replacing_files([*paths, *(out_dir / c for c in synthesis.captures), out_dir / GROUND_TRUTH_FILE])
          as temporary):
        for temp, doc in zip(temporary, synthesis.documents):
            write_json(temp, doc, config.gzip)
        if config.merged:
            write_json(temporary[len(synthesis.documents)], merged_document(synthesis.documents), config.gzip)
        for temp, doc in zip(temporary[len(paths):], synthesis.captures.values()):
            write_json(temp, doc, config.gzip)
        temporary[-1].write_text(json.dumps({**synthesis.ground_truth, "files": names}, indent=1))
    for name in set(previous) - set(names):
        (out_dir / name).unlink(missing_ok=True)
    for folder, wanted in ((MERGED_DIR, config.merged), (CAPTURE_DIR, synthesis.captures)):
        if not wanted and (out_dir / folder).is_dir() and not any((out_dir / folder).iterdir()):
            (out_dir / folder).rmdir()
    return paths
