"""Replay fidelity, what-if accuracy and replay cost against `tracekit.load`, on the shared traces and synth jobs.

Fidelity: every shared trace (file or folder of ranks) with ProfilerSteps, replayed without a what-if: median and
worst |predicted - measured| / measured per step. What-ifs: the workers0 → workers4 pair (remove the DataLoader's
main-thread op from workers0, compare with workers4's measured steps); synth --slow-kernel against a scaled replay
of the baseline; synth communication x0.5 on a 2-rank job. Cost: median of 3 in-process runs of load and replay.

    python bench/replay_fidelity.py [--quick]
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

import polars as pl

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.measure import SHARED, in_process, median  # noqa: E402
from tracekit.pipeline import load  # noqa: E402
from tracekit.replay import replay  # noqa: E402

INPUTS = [p for p in sorted(SHARED.glob("*/*.json*")) if "oracle" not in str(p)] + [
    p for p in sorted(SHARED.glob("multirank/*")) if p.is_dir()] + [
    p for p in sorted(SHARED.glob("diff_pairs/*/*")) if p.is_dir() or p.suffix in (".gz", ".json")]


def median_time(fn, runs: int = 3) -> tuple[float, object]:
    seconds, result = in_process(fn, runs)
    return median(seconds), result


def fidelity(path: Path, runs: int) -> dict | None:
    load_s, tables = median_time(lambda: load(path), runs)
    replay_s, rows = median_time(lambda: replay(tables), runs)
    rows = rows.filter(pl.col("step").is_not_null())
    if rows.is_empty():
        return None
    errors = rows["error_percent"].abs()
    return {"trace": str(path.relative_to(SHARED)), "ranks": rows["rank"].n_unique(), "steps": rows.height,
            "events": tables.events.num_rows, "median_err_%": round(errors.median(), 3),
            "worst_err_%": round(errors.max(), 3), "load_s": round(load_s, 3), "replay_s": round(replay_s, 3),
            "replay/load": round(replay_s / load_s, 2)}


def step_means(rows: pl.DataFrame, column: str) -> float:
    return rows.filter(pl.col("step").is_not_null())[column].mean()


def synth(out: Path, *args: str) -> Path:
    subprocess.run([sys.executable, "-m", "tracekit.cli", "synth", "-o", str(out), *args], check=True,
                   stdout=subprocess.DEVNULL)
    return out


def main() -> None:
    quick = "--quick" in sys.argv
    runs = 1 if quick else 3
    table = [r for p in INPUTS if (r := fidelity(p, runs)) is not None]
    with pl.Config(tbl_rows=100, tbl_cols=20, tbl_width_chars=200):
        print(pl.DataFrame(table))

    pair = SHARED / "diff_pairs" / "resnet50_v100_workers0_vs_workers4"
    w0 = next(p for p in pair.iterdir() if "workers0" in p.name)
    w4 = next(p for p in pair.iterdir() if "workers4" in p.name)
    predicted = replay(load(w0), remove=["op:enumerate(DataLoader)"])
    measured4 = replay(load(w4))
    for warm in (0, 1):  # all steps; without the first (warm-up) step
        p = predicted.filter(pl.col("step") >= predicted["step"].min() + warm)
        m = measured4.filter(pl.col("step") >= measured4["step"].min() + warm)
        print(f"workers0 --remove op:enumerate(DataLoader) (steps after {warm} warm-up): workers0 measured "
              f"{step_means(p, 'measured_ms'):.2f} ms, predicted {step_means(p, 'predicted_ms'):.2f} ms, workers4 "
              f"measured {step_means(m, 'measured_ms'):.2f} ms: error "
              f"{(step_means(p, 'predicted_ms') / step_means(m, 'measured_ms') - 1) * 100:+.1f}%")

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        for ranks, what, slow_args, scale in (
                (1, "kernel gemm x1.5", ["--slow-kernel", "gemm=1.5"], {"kernel:gemm": 1.5}),
                (2, "kernel nccl x0.5", ["--slow-kernel", "nccl=0.5"], {"category:communication": 0.5})):
            base = synth(tmp / f"base{ranks}", "--ranks", str(ranks), "--steps", "4", "--noise", "0.05")
            slow = synth(tmp / f"slow{ranks}", "--ranks", str(ranks), "--steps", "4", "--noise", "0.05", *slow_args)
            p = replay(load(base), scale=scale)
            m = replay(load(slow))
            joined = p.join(m.select("rank", "step", pl.col("measured_ms").alias("truth_ms")), on=["rank", "step"])
            err = ((joined["predicted_ms"] / joined["truth_ms"] - 1) * 100).abs()
            print(f"synth {ranks} rank(s), {what}: replay of baseline vs synth capture: median |error| "
                  f"{err.median():.2f}%, worst {err.max():.2f}% over {joined.height} steps")

        big = synth(tmp / "big", "--ranks", "2", "--steps", "4", "--scale", "117")
        load_s, tables = median_time(lambda: load(big), runs)
        replay_s, _ = median_time(lambda: replay(tables, scale={"kernel:gemm": 1.5}), runs)
        print(f"synth --scale 117 ({tables.events.num_rows:,} events): load {load_s:.2f} s, replay with a what-if "
              f"{replay_s:.2f} s, ratio {replay_s / load_s:.2f}")


if __name__ == "__main__":
    main()
