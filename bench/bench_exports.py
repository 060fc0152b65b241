"""Wall time of `export chakra` and `timeline` against loading the same trace (medians, same process, same run).

    python bench/bench_exports.py [--repeats 3] [TRACE ...]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import tracekit  # noqa: E402
from tracekit.output.chakra import write_chakra  # noqa: E402
from tracekit.output.timeline import write_timeline  # noqa: E402

SHARED = Path(__file__).resolve().parent.parent.parent / "shared" / "traces"
DEFAULT = [SHARED / "nvidia" / "h100_qwen1.5-0.5b.json.gz", SHARED / "multirank" / "dlrm_8ranks_v100"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("traces", nargs="*", type=Path, default=DEFAULT)
    args = parser.parse_args()
    print("| trace | events | load s | export chakra s | timeline s |\n|---|---:|---:|---:|---:|")
    for path in args.traces:
        times: dict[str, list[float]] = {"load": [], "chakra": [], "timeline": []}
        for _ in range(args.repeats):
            started = time.perf_counter()
            tables = tracekit.load(path)
            loaded = time.perf_counter()
            with tempfile.TemporaryDirectory() as out:
                write_chakra(tables, out, "bench")
                exported = time.perf_counter()
                write_timeline(tables, Path(out) / "timeline.json.gz")
                done = time.perf_counter()
            times["load"].append(loaded - started)
            times["chakra"].append(exported - loaded)
            times["timeline"].append(done - exported)
        med = {k: statistics.median(v) for k, v in times.items()}
        print(f"| {path.name} | {tables.events.num_rows:,} | {med['load']:.2f} | {med['chakra']:.2f} | "
              f"{med['timeline']:.2f} |")


if __name__ == "__main__":
    main()
