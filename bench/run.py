"""The bench suite: every command on real traces (bench/recorded's and the shared ones), each run a fresh process, one
Markdown table per command.

    python bench/run.py COMMAND ... [--repeat 3] [--traces NAME ...] [--baseline DIR] [--tracelens BIN]

COMMAND (any of; `all` = every one but same-bytes):
  imports     each command's import floor (a process that only imports what the command imports before it reads a
              byte) and `tracekit report --help`, against the libraries alone (and the baseline's, with --baseline)
  ingest      `tracekit ingest` against `orjson.loads` of the same (decompressed) bytes, both whole processes, and
              the import floor (a process that only imports what ingest imports); and the baseline's, with --baseline
  report      `tracekit report` against TraceLens's perf report (`--tracelens`: its venv's bin folder,
              ../shared/peers/README.md; then also `--no-critical-path`, like for like; a trace TraceLens fails
              on is timed for tracekit alone, with TraceLens's error), and against a second checkout with
              `--baseline`
  stages      one `report` in process, timed by stage (imports, read, link, analyses, write) and by analysis, with
              the peak RSS after each stage and how much each analysis raised it (with `--baseline`, the
              baseline's in the same rotation: the slowest analyses and the report's peak, before and after)
  timeline    `tracekit timeline` against `tracekit ingest` (and the baseline's timeline with `--baseline`)
  diff        `tracekit diff` of three pairs (V100 workers0/workers4, H100/MI300X Qwen, two SD3.5 captures), and
              with `--no-critical-path`, against loading each run (and the baseline's diff with `--baseline`)
  sql         `tracekit sql` (a count over events, on the trace and on its ingested dataset) and
              `tracekit run kernel_summary`, against a load
  exports     the other commands that read a trace: `export chakra`, `replay` (the whole trace, and its first
              steady step), `graph --step` and `run kernel_summary --step`, against a load
  same-bytes  every output of this checkout and of `--baseline` (e.g. a worktree of the base commit), byte by
              byte: report, timeline (whole and --step), export chakra, graph --step (and a missing step's
              message), replay (rows and timeline, whole and --step), run --step; exit 1 if any differs
              (run before every speed or refactoring commit)

Every figure is the median of --repeat runs, the commands of one table alternating run by run so that a change of
the machine's load hits all alike: read the ratios, which come from one run, and beside the issue's targets ("rounds
at 5×", "rounds at ≤ 1.5×") in how many of the alternating rounds the target held, round by round. CPU is user +
system seconds of the command (all its threads and child processes: the reader's helpers), which a loaded machine
moves less than wall time; peak is the command's peak RSS, its child processes' added while they run
(bench/measure.py explains why a launcher measures it, and how).
"""

from __future__ import annotations

import argparse
import compileall
import datetime
import gzip
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from measure import (  # noqa: E402
    REPO,
    SHARED,
    alternate,
    cores_needed,
    evict_libraries,
    failure,
    median,
    rounds_where,
    rounds_within,
    run_fresh,
    table,
    trace_path,
    tracekit_cmd,
)

from tracekit.machine import usable_cpus  # noqa: E402  (the CPUs the commands run here may use)

# the stand-ins for issue 27's held-out OWLv2 and SD3.5 inference traces (bench/recorded), then the largest shared
# traces TraceLens reads: the vLLM decode trace (32.5 MB of JSON, Python frames and a HIP graph capture, like the
# serving traces issue 27 names) and the four largest training and inference traces after it; then every other
# shared trace of 1-60 MB of JSON, largest first: where a command's fixed part shows, and the traces TraceLens does
# not read (a legacy bare list, traces without GPU ops)
TRACES = ["recorded/owlv2.json.gz", "recorded/sd35_a.json.gz", "amd/mi300x_vllm_decode_graph_capture.json.gz",
          "nvidia/a100_trainer_rank0of16_cudagraph.json.gz", "et_pairs/rtx2080ti_linear/kineto.json.gz",
          "amd/mi300x_resnet_act_checkpoint_rank0of8.json.gz", "nvidia/h100_qwen1.5-0.5b.json.gz",
          "diff_pairs/resnet50_v100_workers0_vs_workers4/workers0.pt.trace.json.gz",
          "legacy/resnet50_2020-12_bare_list.pt.trace.json.gz", "nvidia/v100_ns_resolution.json.gz",
          "nvidia/b200_eager_rank0of8.json.gz", "nvidia/a100_nccl_rank0of2.json.gz", "other/mtia_inference.json.gz",
          "other/cpu_only_rank34of300.json.gz", "multirank/meta_trainer_128ranks_sampled/rank-0.json.gz"]
DIFF_PAIRS = [("diff_pairs/resnet50_v100_workers0_vs_workers4/workers0.pt.trace.json.gz",
               "diff_pairs/resnet50_v100_workers0_vs_workers4/workers4.pt.trace.json.gz"),
              ("nvidia/h100_qwen1.5-0.5b.json.gz", "amd/mi300x_qwen1.5-0.5b.json.gz"),
              ("recorded/sd35_a.json.gz", "recorded/sd35_b.json.gz")]
SAME_BYTES_TRACES = TRACES + ["multirank/dlrm_8ranks_v100",
                              "nvidia/h100_bert-small.json.gz", "et_pairs/cpu_torch2.13_single",
                              "et_pairs/a100_simple_add"]
ORJSON = ("import gzip, sys, orjson; p = sys.argv[1]; "
          "orjson.loads(gzip.open(p).read() if p.endswith('.gz') else open(p, 'rb').read())")
STAGES = ("imports", "read", "link", "analyses", "write")
ALL_ANALYSES = "(all analyses: CPU s / the report's peak MB)"
LOAD = "import sys, tracekit; tracekit.load(sys.argv[1])"
# what `tracekit ingest` imports before it reads a byte (its command module and the dataset writer): the floor of
# any ingest process built on pyarrow, polars and DuckDB
INGEST_IMPORTS = "import tracekit.cli, tracekit.cli.traces, tracekit.output.dataset"
# the same for the other commands (what each command module imports, and what the command imports when it runs)
COMMAND_IMPORTS = {
    "ingest": INGEST_IMPORTS,
    "report": "import tracekit.cli, tracekit.cli.traces, tracekit.pipeline, tracekit.output.terminal",
    "sql": "import tracekit.cli, tracekit.cli.query, tracekit.query.database",
    "diff": "import tracekit.cli, tracekit.cli.compare, tracekit.pipeline",
    "timeline": "import tracekit.cli, tracekit.cli.export, tracekit.pipeline, tracekit.output.timeline",
}
# the libraries every command above calls, alone: the floor no module structure of tracekit's goes below
LIBRARIES = "import click, rich.console, pyarrow, pyarrow.compute, polars, duckdb, msgspec"
# what TraceLens's report imports before it reads a byte
TRACELENS_IMPORTS = "import TraceLens.Reporting.generate_perf_report_pytorch"


def json_mb(trace: Path) -> float:
    """MB of JSON text (decompressed)."""
    out = subprocess.run(f"zcat -f {trace} | wc -c", shell=True, capture_output=True, text=True, check=True)
    return int(out.stdout) / 2**20


class Bench:
    def __init__(self, args):
        self.args = args
        self.tmp = Path(tempfile.mkdtemp(prefix="tracekit-bench-"))
        self.traces = [trace_path(name) for name in args.traces]
        missing = [str(t) for t in self.traces if not t.exists()]
        if missing:
            raise SystemExit(f"not found: {', '.join(missing)} (the shared traces: {SHARED})")

    def out(self, name: str) -> str:
        return str(self.tmp / name)

    def tk(self, *args: str) -> tuple[list[str], Path]:
        return tracekit_cmd(*args), REPO

    def heading(self, title: str) -> None:
        print(f"\n### {title}\n", flush=True)

    # ------------------------------------------------------------------ commands

    def ingest(self) -> None:
        self.heading("ingest: `tracekit ingest TRACE -o DIR` against `orjson.loads` of the same bytes; the import "
                     "floor: a process that only imports what ingest imports")
        rows = []
        for trace in self.traces:
            mb = json_mb(trace)
            commands = {"ingest": self.tk("ingest", str(trace), "-o", self.out("ds"), "--force"),
                        "orjson": ([sys.executable, "-c", ORJSON, str(trace)], REPO),
                        "imports": ([sys.executable, "-c", INGEST_IMPORTS], REPO)}
            if self.args.baseline:
                commands["baseline"] = (tracekit_cmd("ingest", str(trace), "-o", self.out("base-ds"), "--force"),
                                        self.args.baseline)
            s = alternate(commands, self.args.repeat)
            i, o, f = s["ingest"], s["orjson"], s["imports"]
            row = [trace.name, f"{mb:.1f}", i.wall, o.wall, f"{i.wall / o.wall:.2f}×",
                   rounds_where(i, o, 1.5, at_least=False), i.cpu, o.cpu, f"{i.cpu / o.cpu:.2f}×", f.cpu,
                   f"{f.cpu / o.cpu:.2f}×", i.cpu - f.cpu,
                   f"{(i.cpu - f.cpu) / o.cpu:.2f}×", f"{i.peak_mb:.0f}", f"{o.peak_mb:.0f}", f"{f.peak_mb:.0f}",
                   f"{i.peak_mb / mb:.1f}×"]
            if self.args.baseline:
                row += [s["baseline"].wall, s["baseline"].cpu, f"{s['baseline'].peak_mb:.0f}"]
            rows.append(row)
            print(".", end="", flush=True)
        header = ["trace", "JSON MB", "ingest s", "orjson s", "wall ratio", "rounds at ≤ 1.5×", "ingest CPU s",
                  "orjson CPU s", "CPU ratio", "imports CPU s", "imports ÷ orjson", "ingest − imports CPU s",
                  "(ingest − imports) ÷ orjson", "ingest peak MB", "orjson peak MB", "imports peak MB",
                  "ingest peak ÷ JSON"]
        if self.args.baseline:
            header += ["baseline s", "baseline CPU s", "baseline peak MB"]
        print("\n" + table(header, rows))

    def imports(self) -> None:
        self.heading("imports: a process that only imports what each command imports before it reads a byte"
                     + (", and the same in the baseline" if self.args.baseline else ""))
        commands = {name: [sys.executable, "-c", code] for name, code in COMMAND_IMPORTS.items()}
        commands |= {"report --help": tracekit_cmd("report", "--help"), "(the libraries alone)":
                     [sys.executable, "-c", LIBRARIES]}
        runs = {name: (cmd, REPO) for name, cmd in commands.items()}
        if self.args.baseline:
            runs |= {f"{name} (baseline)": (cmd, self.args.baseline) for name, cmd in commands.items()
                     if "libraries" not in name}
        s = alternate(runs, self.args.repeat)
        rows = []
        for name in commands:
            row = [name, s[name].cpu, f"{s[name].peak_mb:.0f}"]
            if self.args.baseline:
                b = s.get(f"{name} (baseline)")
                row += [b.cpu, f"{b.peak_mb:.0f}"] if b else ["", ""]
            rows.append(row)
        header = ["command", "imports CPU s", "imports peak MB"]
        if self.args.baseline:
            header += ["baseline CPU s", "baseline peak MB"]
        print(table(header, rows))

    def report(self) -> None:
        tracelens = self.args.tracelens / "TraceLens_generate_perf_report_pytorch" if self.args.tracelens else None
        if tracelens and not tracelens.exists():
            raise SystemExit(f"--tracelens: {tracelens} does not exist (see ../shared/peers/README.md)")
        self.heading("report: `tracekit report TRACE -o DIR`" + (" against TraceLens's perf report" if tracelens
                                                               else ""))
        rows = []
        for trace in self.traces:
            commands = {"tracekit": self.tk("report", str(trace), "-o", self.out("report"), "--force")}
            tl_cmd = ([str(tracelens), "--profile_json_path", str(trace), "--output_xlsx_path", self.out("tl.xlsx")]
                      if tracelens else None)
            # a trace TraceLens fails on (a legacy bare list, no GPU ops) is timed for tracekit alone, with why
            tl_fails = tl_cmd and failure(tl_cmd)
            if tl_cmd and not tl_fails:
                commands["TraceLens"] = (tl_cmd, REPO)
                # like for like: TraceLens's report has no critical path
                commands["no critical path"] = self.tk("report", str(trace), "-o", self.out("report_ncp"), "--force",
                                                       "--no-critical-path")
            if self.args.baseline:
                commands["baseline"] = (tracekit_cmd("report", str(trace), "-o", self.out("base"), "--force"),
                                        self.args.baseline)
            s = alternate(commands, self.args.repeat)
            t = s["tracekit"]
            row = [trace.name, f"{json_mb(trace):.1f}", t.wall, t.cpu, f"{t.peak_mb:.0f}"]
            if tl_fails:
                row += [f"fails: {tl_fails.replace('|', '/')}", "–", "–", "–", "–", t.cores_used()] + ["–"] * 8
            elif tracelens:
                tl = s["TraceLens"]
                n = s["no critical path"]
                row += [tl.wall, tl.cpu, f"{tl.peak_mb:.0f}", f"{tl.wall / t.wall:.2f}×", rounds_where(tl, t, 5),
                        t.cores_used(), cores_needed(tl, t, 5, usable_cpus()), f"{tl.cpu / t.cpu:.2f}×",
                        f"{tl.peak_mb / t.peak_mb:.2f}×", n.wall, f"{n.peak_mb:.0f}",
                        f"{tl.wall / n.wall:.2f}×", rounds_where(tl, n, 5), f"{tl.peak_mb / n.peak_mb:.2f}×"]
            if self.args.baseline:
                b = s["baseline"]
                row += [b.wall, b.cpu, f"{b.peak_mb:.0f}"]
            rows.append(row)
            print(".", end="", flush=True)
        header = ["trace", "JSON MB", "tracekit s", "tracekit CPU s", "tracekit peak MB"]
        if tracelens:
            header += ["TraceLens s", "TraceLens CPU s", "TraceLens peak MB", "speed-up (wall)", "rounds at 5×",
                       "cores used", "cores for 5× (rounds over the usable CPUs)", "speed-up (CPU)", "leaner (peak)",
                       "no critical path s", "no critical path peak MB", "its speed-up", "its rounds at 5×",
                       "its leaner"]
        if self.args.baseline:
            header += ["baseline s", "baseline CPU s", "baseline peak MB"]
        print("\n" + table(header, rows))

    def stages(self) -> None:
        self.heading("stages of `report`, in one process: wall / CPU seconds, and the process's peak RSS after each")
        rows, analyses, baseline = [], {}, {}
        for trace in self.traces:
            runs, each_runs, base_runs = [], [], []
            for _ in range(self.args.repeat):
                runs.append(self.stages_run(REPO, trace))
                each_runs.append(self.stages_run(REPO, trace, one_at_a_time=True))
                if self.args.baseline:
                    base_runs.append(self.stages_run(self.args.baseline, trace, one_at_a_time=True))
            for name in base_runs[0]["per_analysis"] if base_runs else ():
                baseline.setdefault(name, {})[trace.name] = tuple(
                    median(r["per_analysis"][name][i] for r in base_runs) for i in range(2))
            if base_runs:
                baseline.setdefault(ALL_ANALYSES, {})[trace.name] = (
                    median(r["stages"]["analyses"][1] for r in base_runs),
                    median(max(r["peak_mb"].values()) for r in base_runs))
            wall = {k: median(r["stages"][k][0] for r in runs) for k in STAGES}
            cpu = {k: median(r["stages"][k][1] for r in runs) for k in STAGES}
            peak = {k: median(r["peak_mb"][k] for r in runs) for k in STAGES}
            rows.append([trace.name, f"{json_mb(trace):.1f}", runs[0]["events"],
                         *(f"{wall[k]:.2f} / {cpu[k]:.2f} / {peak[k]:.0f}" for k in STAGES),
                         f"{sum(wall.values()):.2f} / {sum(cpu.values()):.2f} / {max(peak.values()):.0f}"])
            for name in each_runs[0]["per_analysis"]:
                analyses.setdefault(name, {})[trace.name] = tuple(
                    median(r["per_analysis"][name][i] for r in each_runs) for i in range(2))
            analyses.setdefault(ALL_ANALYSES, {})[trace.name] = (
                median(r["stages"]["analyses"][1] for r in each_runs),
                median(max(r["peak_mb"].values()) for r in each_runs))
            print(".", end="", flush=True)
        print("\n" + table(["trace", "JSON MB", "events", *STAGES, "total"], rows))
        names = [t.name for t in self.traces]
        top = sorted((a for a in analyses if a != ALL_ANALYSES),
                     key=lambda a: -sum(v[0] for v in analyses[a].values()))
        print("\nPer analysis, in a second process that runs them one at a time (CPU seconds, each on its own / MB the "
              "process's peak RSS rose while it ran; slowest first):\n")
        print(table(["analysis", *names], [[a, *(f"{analyses[a][n][0]:.2f} / {analyses[a][n][1]:.0f}"
                                                  if n in analyses[a] else "" for n in names)] for a in top]))
        if baseline:
            print("\nThe slowest analyses, baseline → this checkout, one at a time (CPU s / MB of peak rise; same "
                  "rotation; the shared tables are part of the analysis that first needs each):\n")
            shown = [a for a in top[:8] if a in baseline] + [ALL_ANALYSES]
            print(table(["analysis", *names], [[a, *(
                f"{baseline[a][n][0]:.2f} / {baseline[a][n][1]:.0f} → {analyses[a][n][0]:.2f} / {analyses[a][n][1]:.0f}"
                if n in analyses[a] and n in baseline[a] else "" for n in names)] for a in shown]))

    def stages_run(self, repo: Path, trace: Path, one_at_a_time: bool = False) -> dict:
        """One stages child of checkout REPO over TRACE (its analyses as the report runs them, or one at a time,
        each measured): its JSON line."""
        proc = subprocess.run([sys.executable, str(repo / "bench" / "run.py"), "--stages-child", str(trace),
                               self.out("stages"), *(["--one-at-a-time"] if one_at_a_time else [])],
                              env={**os.environ, "PYTHONPATH": str(repo)},
                              capture_output=True, text=True)
        if proc.returncode:
            raise SystemExit(f"stages of {trace} ({repo}): {proc.stderr[-2000:]}")
        return json.loads(proc.stdout.splitlines()[-1])

    def timeline(self) -> None:
        self.heading("timeline: `tracekit timeline TRACE -o FILE` against `tracekit ingest`"
                     + (" (and against the baseline's timeline)" if self.args.baseline else ""))
        rows = []
        for trace in self.traces:
            commands = {"timeline": self.tk("timeline", str(trace), "-o", self.out("timeline.json")),
                        "ingest": self.tk("ingest", str(trace), "-o", self.out("ds"), "--force")}
            if self.args.baseline:
                commands["baseline"] = (tracekit_cmd("timeline", str(trace), "-o", self.out("base.json")),
                                        self.args.baseline)
            s = alternate(commands, self.args.repeat)
            t, i = s["timeline"], s["ingest"]
            row = [trace.name, t.wall, i.wall, f"{t.wall / i.wall:.2f}×", rounds_where(t, i, 1.5, at_least=False),
                   t.cpu, i.cpu, f"{t.cpu / i.cpu:.2f}×", f"{t.peak_mb:.0f}", f"{i.peak_mb:.0f}"]
            if self.args.baseline:
                b = s["baseline"]
                row += [b.wall, b.cpu, f"{b.cpu / i.cpu:.2f}×", f"{b.peak_mb:.0f}"]
            rows.append(row)
            print(".", end="", flush=True)
        header = ["trace", "timeline s", "ingest s", "wall ratio", "rounds at ≤ 1.5×", "timeline CPU s",
                  "ingest CPU s", "CPU ratio", "timeline peak MB", "ingest peak MB"]
        if self.args.baseline:
            header += ["baseline s", "baseline CPU s", "baseline CPU ratio", "baseline peak MB"]
        print("\n" + table(header, rows))

    def diff(self) -> None:
        self.heading("diff: `tracekit diff A B -o FILE` against loading A and B (`tracekit.load`, whole processes)"
                     + (", and the baseline's diff" if self.args.baseline else ""))
        rows = []
        for pair in DIFF_PAIRS:
            a, b = (trace_path(p) for p in pair)
            if not (a.exists() and b.exists()):  # a machine without the shared traces: the recorded pair alone
                print(f"\n(left out: {a.name} vs {b.name}, not found under {SHARED})")
                continue
            commands = {"diff": self.tk("diff", str(a), str(b), "-o", self.out("diff.xlsx"), "--force"),
                        "no critical path": self.tk("diff", str(a), str(b), "-o", self.out("diff_ncp.xlsx"),
                                                    "--force", "--no-critical-path"),
                        "load A": ([sys.executable, "-c", LOAD, str(a)], REPO),
                        "load B": ([sys.executable, "-c", LOAD, str(b)], REPO)}
            if self.args.baseline:
                commands["baseline"] = (tracekit_cmd("diff", str(a), str(b), "-o", self.out("base.xlsx"), "--force"),
                                        self.args.baseline)
            s = alternate(commands, self.args.repeat)
            d, n, la, lb = s["diff"], s["no critical path"], s["load A"], s["load B"]
            row = [f"{a.name} vs {b.name}", d.wall, la.wall + lb.wall, d.wall - la.wall - lb.wall,
                   rounds_within(d, [la, lb], 1.0), d.cpu, la.cpu + lb.cpu, d.cpu - la.cpu - lb.cpu,
                   f"{d.peak_mb:.0f}", f"{max(la.peak_mb, lb.peak_mb):.0f}", n.wall, n.wall - la.wall - lb.wall,
                   rounds_within(n, [la, lb], 1.0), f"{n.peak_mb:.0f}"]
            if self.args.baseline:
                row += [s["baseline"].wall, s["baseline"].cpu, f"{s['baseline'].peak_mb:.0f}"]
            rows.append(row)
            print(".", end="", flush=True)
        header = ["pair", "diff s", "load A + load B s", "diff − loads s", "rounds at ≤ loads + 1 s", "diff CPU s",
                  "loads CPU s", "diff − loads CPU s", "diff peak MB", "load peak MB (larger)", "no critical path s",
                  "no critical path − loads s", "its rounds at ≤ loads + 1 s", "no critical path peak MB"]
        if self.args.baseline:
            header += ["baseline s", "baseline CPU s", "baseline peak MB"]
        print("\n" + table(header, rows))

    def sql(self) -> None:
        self.heading("sql and run: a query over a trace, and over its ingested dataset, against loading the trace")
        rows = []
        for trace in self.traces:
            dataset = self.out("sql-dataset")
            run_fresh(tracekit_cmd("ingest", str(trace), "-o", dataset, "--force"), (0, 3))
            count = "select count(*) from events"
            s = alternate({"sql": self.tk("sql", count, str(trace)),
                           "sql dataset": self.tk("sql", count, dataset),
                           "run": self.tk("run", "kernel_summary", str(trace)),
                           "load": ([sys.executable, "-c", LOAD, str(trace)], REPO)}, self.args.repeat)
            rows.append([trace.name, s["sql"].wall, s["sql dataset"].wall, s["run"].wall, s["load"].wall,
                         s["sql"].cpu, s["sql dataset"].cpu, s["run"].cpu, s["load"].cpu,
                         f"{s['sql'].peak_mb:.0f}", f"{s['sql dataset'].peak_mb:.0f}", f"{s['run'].peak_mb:.0f}"])
            print(".", end="", flush=True)
        print("\n" + table(["trace", "sql s", "sql on dataset s", "run kernel_summary s", "load s", "sql CPU s",
                            "sql on dataset CPU s", "run CPU s", "load CPU s", "sql peak MB",
                            "sql on dataset peak MB", "run peak MB"], rows))

    def exports(self) -> None:
        self.heading("export chakra, replay, graph --step, run --step: each against loading the trace")
        names = ["export chakra", "replay", "replay --step", "graph --step", "run --step"]
        rows = []
        for trace in self.traces:
            step = first_step(trace)
            commands = {"export chakra": self.tk("export", "chakra", str(trace), "-o", self.out("chakra")),
                        "replay": self.tk("replay", str(trace), "--format", "json"),
                        "load": ([sys.executable, "-c", LOAD, str(trace)], REPO)}
            if step is not None:
                commands |= {"replay --step": self.tk("replay", str(trace), "--step", str(step), "--format", "json"),
                             "graph --step": self.tk("graph", str(trace), "--step", str(step), "-o",
                                                     self.out("graph.graphml")),
                             "run --step": self.tk("run", "kernel_summary", str(trace), "--step", str(step))}
            s = alternate(commands, self.args.repeat)
            load = s["load"]
            rows.append([trace.name, "none" if step is None else step, load.wall, load.cpu]
                        + [f"{s[n].wall:.2f} / {s[n].cpu:.2f} / {s[n].wall / load.wall:.2f}× / {s[n].peak_mb:.0f}"
                           if n in s else "(no steps)" for n in names])
            print(".", end="", flush=True)
        print("\n" + table(["trace", "step", "load s", "load CPU s"]
                           + [f"{n}: s / CPU s / × load / peak MB" for n in names], rows))

    def same_bytes(self) -> bool:
        """Every output (OUTPUTS) of SAME_BYTES_TRACES from this checkout and the baseline, compared file by file."""
        if not self.args.baseline:
            raise SystemExit("same-bytes needs --baseline DIR (e.g. `git worktree add /tmp/base BASE_COMMIT`)")
        self.heading(f"same-bytes: every output of {REPO} against {self.args.baseline}")
        same = True
        for name in self.args.traces if self.args.traces != TRACES else SAME_BYTES_TRACES:
            trace = trace_path(name)
            if not trace.exists():
                continue
            step = first_step(trace, self.args.baseline)
            outs = [write_outputs(repo, trace, step, self.tmp / "same" / label / name.replace("/", "_"))
                    for label, repo in (("new", REPO), ("base", self.args.baseline))]
            files, differ = compare_outputs(*outs)
            same &= not differ
            print(f"- {name} (step {step}): {len(files)} files: " + ("identical" if not differ
                                                                    else f"DIFFER: {differ}"), flush=True)
        return same


def peak_rss_mb() -> float:
    """This process's peak RSS so far (VmHWM), MiB."""
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmHWM")) / 1024


def first_step(trace: Path, repo: Path = REPO) -> int | None:
    """The first steady step of TRACE (of any rank), else its first step, as checkout REPO finds them; None without
    steps."""
    proc = subprocess.run(tracekit_cmd("run", "steps", str(trace), "--format", "json"), cwd=repo,
                          env={**os.environ, "PYTHONPATH": str(repo)}, capture_output=True, text=True, check=True)
    rows = json.loads(proc.stdout)
    steps = sorted({r["step"] for r in rows if r["steady"]}) or sorted({r["step"] for r in rows})
    return steps[0] if steps else None


def outputs(trace: Path, step: int | None) -> dict[str, list[str]]:
    """What same-bytes compares: a file → the command writing it (its stdout, for NAME.stdout), run in the output
    folder (relative paths, so that a message naming a file reads the same from both checkouts)."""
    t = str(trace)
    commands = {"report": ["report", t, "-o", "report", "--force"],
                "timeline.json": ["timeline", t, "-o", "timeline.json"],
                "chakra": ["export", "chakra", t, "-o", "chakra"],
                "replay.stdout": ["replay", t, "--format", "json", "-o", "replay_timeline.json.gz"]}
    if step is not None:
        commands |= {"graph.graphml": ["graph", t, "--step", str(step), "-o", "graph.graphml", "-o", "graph.dot"],
                     "timeline_step.json": ["timeline", t, "--step", str(step), "-o", "timeline_step.json"],
                     "replay_step.stdout": ["replay", t, "--step", str(step), "--format", "json"],
                     "run_step.stdout": ["run", "kernel_summary", t, "--step", str(step), "--format", "csv"]}
    return commands | {"missing_step.stdout": ["graph", t, "--step", "999999", "-o", "missing.dot"]}


def write_outputs(repo: Path, trace: Path, step: int | None, out: Path) -> Path:
    """OUTPUTS of TRACE written by checkout REPO under OUT; for NAME.stdout, the command's stdout, stderr and exit
    code."""
    out.mkdir(parents=True, exist_ok=True)
    for name, args in outputs(trace, step).items():
        proc = subprocess.run(tracekit_cmd(*args), env={**os.environ, "PYTHONPATH": str(repo)}, cwd=out,
                              capture_output=True)
        if name.endswith(".stdout"):
            (out / name).write_bytes(proc.stdout + proc.stderr + f"\nexit {proc.returncode}\n".encode())
        elif proc.returncode not in (0, 3):
            (out / f"{name}.failed").write_bytes(proc.stderr)
    return out


def compare_outputs(new: Path, base: Path) -> tuple[list[str], list[str]]:
    """The files under NEW, and those that differ from (or are missing in) BASE, or are only in BASE. A .gz file is
    compared decompressed: its header holds the time and the temporary name it was written under."""
    def content(path: Path) -> bytes:
        return gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()

    files = sorted(str(p.relative_to(new)) for p in new.rglob("*") if p.is_file())
    base_files = sorted(str(p.relative_to(base)) for p in base.rglob("*") if p.is_file())
    differ = [f for f in files if f not in base_files or content(new / f) != content(base / f)]
    return files, differ + sorted(set(base_files) - set(files))


def stages_child(trace: Path, out: Path, one_at_a_time: bool) -> None:
    """One report of TRACE in this process, timed by stage (wall and CPU seconds: imports, read, link, analyses,
    write; imports' wall is the CPU of the interpreter's start too) with the peak RSS after each; its analyses as
    the report runs them (`analysed_and_written`: the workbooks written beside them), or with ONE_AT_A_TIME each
    on its own and timed (CPU seconds of each, after the ones it reads, and how much it raised the peak; a shared
    table is computed, and counted, in the first analysis that calls its macro), the workbooks written after them;
    prints one JSON line."""
    import tracekit  # noqa: F401  (what `tracekit report` imports)
    from tracekit.cli import traces  # noqa: F401
    from tracekit.engine.catalog import analysis_order, connect
    from tracekit.link.edges import build_edges
    from tracekit.output import terminal, workbooks
    from tracekit.pipeline import read_files
    from tracekit.query.analyses import run_into

    clocks = [(time.perf_counter(), time.process_time())]
    stages = {"imports": (time.process_time(), time.process_time())}
    peaks = {"imports": peak_rss_mb()}

    def lap() -> tuple[float, float]:
        clocks.append((time.perf_counter(), time.process_time()))
        return clocks[-1][0] - clocks[-2][0], clocks[-1][1] - clocks[-2][1]

    read = read_files([trace], None, None, edges=False, workers=None)
    stages["read"], peaks["read"] = lap(), peak_rss_mb()
    tables = build_edges(read)
    stages["link"], peaks["link"] = lap(), peak_rss_mb()
    names = list(dict.fromkeys(workbooks.report_queries(len(tables.rank_list)) + list(terminal.QUERIES)))
    order = list(dict.fromkeys(step for name in names for step in analysis_order(name)))
    per_analysis, results, failures = {}, {}, {}
    start = clocks[-1]
    if one_at_a_time:
        with connect(tables, materialize=True) as con:
            before = peak_rss_mb()
            # the shared tables are computed by the first analysis that needs each (`catalog.connect`)
            per_analysis["(connection)"] = (lap()[1], before - peaks["link"])
            for name in order:
                run_into(con, name, results, failures)
                per_analysis[name] = (lap()[1], peak_rss_mb() - before)
                before = peak_rss_mb()
            lap()
        stages["analyses"] = (clocks[-1][0] - start[0], clocks[-1][1] - start[1])
        peaks["analyses"] = peak_rss_mb()
        done = workbooks.Analyses({n: results[n] for n in names if n in results}, failures, tuple(tables.rank_list))
        workbooks.write_reports(tables, out, force=True, analyses_done=done, problems=[])
        stages["write"], peaks["write"] = lap(), peak_rss_mb()
    else:
        # as the report runs them, the workbooks written beside the analyses: `analyses` ends with the last
        # analysis, `write` is what the writing took after it
        jobs = workbooks.workbook_jobs(tuple(tables.rank_list))
        ended = []

        def progress(_done: int, _total: int, what: str) -> None:
            if what.startswith("analysis "):
                ended[:] = [(time.perf_counter(), time.process_time())]

        with workbooks.staged_workbooks(out) as staging:
            workbooks.analysed_and_written(tables, names, jobs,
                                           [staging / workbooks.workbook_name(job) for job in jobs], progress)
        clocks.append(ended[0])
        stages["analyses"] = (clocks[-1][0] - start[0], clocks[-1][1] - start[1])
        stages["write"], peaks["analyses"] = lap(), peak_rss_mb()
        peaks["write"] = peaks["analyses"]  # one peak for both: they overlap
    print(json.dumps({"stages": stages, "peak_mb": peaks, "events": tables.events.num_rows,
                      "per_analysis": per_analysis}))


def main() -> None:
    if sys.argv[1:2] == ["--stages-child"]:
        return stages_child(Path(sys.argv[2]), Path(sys.argv[3]), sys.argv[4:5] == ["--one-at-a-time"])
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("commands", nargs="+", choices=["all", "imports", "ingest", "report", "stages", "timeline",
                                                        "diff", "sql", "exports", "same-bytes"])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--traces", nargs="+", default=TRACES,
                        help="paths under ../shared/traces, or recorded/FILE: bench/recorded's")
    parser.add_argument("--baseline", type=lambda p: Path(p).resolve(), help="another tracekit checkout")
    parser.add_argument("--tracelens", type=Path, help="the bin folder of TraceLens's venv")
    args = parser.parse_args()
    commands = (["imports", "ingest", "report", "stages", "timeline", "diff", "sql", "exports"] if "all" in args.commands
                else args.commands)
    # Compiled once, as `pip install` compiles an installed package (PYTHONDONTWRITEBYTECODE would otherwise make
    # every run compile tracekit's modules again).
    for checkout in [REPO] + ([args.baseline] if args.baseline else []):
        compileall.compile_dir(checkout / "tracekit", quiet=1)
    # The environments' shared libraries as a machine that has read them from disk holds them (not as the
    # installer's writes left them: `evict_libraries`), read back once by a process importing what the timed
    # commands import (orjson for ingest's baseline, where installed), unmeasured.
    environments = list(dict.fromkeys([Path(sys.prefix), Path(sys.base_prefix)]
                                      + ([args.tracelens.parent] if args.tracelens else [])))
    files, size = evict_libraries(environments)
    warm = [LIBRARIES, *COMMAND_IMPORTS.values()] + (["import orjson"] if importlib.util.find_spec("orjson") else [])
    subprocess.run([sys.executable, "-c", "; ".join(warm)], check=True, env={**os.environ, "PYTHONPATH": str(REPO)})
    if args.tracelens:
        subprocess.run([str(args.tracelens / "python"), "-c", TRACELENS_IMPORTS], check=True)
    commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "tracekit", "queries"],
                           capture_output=True, text=True).stdout.strip()
    print(f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, commit {commit}"
          f"{' (+ uncommitted changes)' if dirty else ''}, {os.cpu_count()} CPUs, load average "
          f"{os.getloadavg()[0]:.1f}, median of {args.repeat} runs; {files} shared libraries ({size / 2**20:.0f} MB) "
          f"of {', '.join(map(str, environments))} dropped from the page cache and read back", flush=True)
    bench = Bench(args)
    ok = True
    try:
        for command in commands:
            if command == "same-bytes":
                ok &= bench.same_bytes()
            else:
                getattr(bench, command)()
    finally:
        shutil.rmtree(bench.tmp, ignore_errors=True)
    print(f"\nload average after: {os.getloadavg()[0]:.1f}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
