"""How the GPU traces in this folder were recorded (PyTorch profiler on one NVIDIA GPU).

Run on a machine with CUDA: ``python tests/data/gpu/record.py OUTDIR``. Each part is independent; a part that fails
prints its traceback and the others still run. Writes, gzipped:
- ``graph_capture.json.gz`` / ``graph_replay.json.gz``: a serving-style pair. Two CUDA graphs (batch 8 and 16) of a
  small transformer are captured under the profiler (the capture trace: the ops, shapes and module stack that
  launched every kernel), then replayed alternately in ``execute_model`` iterations under a second profiler session
  (the replay trace: ``cudaGraphLaunch`` and the kernels sharing its correlation).
- ``et_train.json.gz`` / ``kineto_train.json.gz``: an Execution Trace + Kineto pair of the same training steps,
  with ``enable_cuda_sync_events`` (a host sync, an ``.item()``, a side stream waiting on an event).
- ``noise_a.json.gz`` / ``noise_b.json.gz``: two captures of one unchanged training job, for run-to-run noise;
  ``noise_c.json.gz`` (part ``noise_c``, run as its own process) a third from another process.
- ``changed_wide.json.gz`` (part ``wide``): the same job with the feed-forward layers twice as wide (a known change:
  the ``up``/``down`` GEMMs, their backward and their optimizer work grow, the rest does not).
- ``graph_fork_capture.json.gz`` / ``graph_fork_replay.json.gz`` (part ``graph_fork``): one graph whose capture forks
  onto a side stream and joins back, so its replay runs kernels on two streams.
- ``nccl_rank0of1.json.gz`` (part ``nccl``): training with gradients all-reduced and a tensor all-gathered through
  NCCL (one rank), for real NCCL kernels and ``record_param_comms`` arguments.

- ``waits.json.gz`` (part ``waits``): event waits recorded on the stream the thread last launched on and on another
  one, a wait that holds a kernel back, and an Event Sync, for the rule that infers an event's record.

Parts run in the order given on the command line (default: the first four); ``recorded.json`` collects what each
run reported.
"""

import gzip
import json
import os
import shutil
import sys
import traceback

import torch
from torch.profiler import ExecutionTraceObserver, ProfilerActivity, profile, record_function, schedule

DIM, HEADS, LAYERS, SEQ = 512, 8, 4, 64
ACTIVITIES = [ProfilerActivity.CPU, ProfilerActivity.CUDA]


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.norm1 = torch.nn.LayerNorm(DIM)
        self.qkv = torch.nn.Linear(DIM, 3 * DIM)
        self.proj = torch.nn.Linear(DIM, DIM)
        self.norm2 = torch.nn.LayerNorm(DIM)
        self.up = torch.nn.Linear(DIM, 4 * DIM)
        self.down = torch.nn.Linear(4 * DIM, DIM)

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = self.qkv(self.norm1(x)).chunk(3, dim=-1)
        heads = [z.reshape(b, t, HEADS, DIM // HEADS).transpose(1, 2) for z in (q, k, v)]
        a = torch.nn.functional.scaled_dot_product_attention(*heads, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, DIM))
        return x + self.down(torch.nn.functional.gelu(self.up(self.norm2(x))))


def model(ffn=4):
    torch.manual_seed(0)
    blocks = [Block() for _ in range(LAYERS)]
    if ffn != 4:
        for block in blocks:
            block.up = torch.nn.Linear(DIM, ffn * DIM)
            block.down = torch.nn.Linear(ffn * DIM, DIM)
    return torch.nn.Sequential(*blocks).cuda()


def export(prof, path):
    raw = path[: -len(".gz")]
    prof.export_chrome_trace(raw)
    with open(raw, "rb") as src, gzip.open(path, "wb") as dst:
        shutil.copyfileobj(src, dst)
    os.remove(raw)


def graph_pair(out):
    net = model().eval().to(torch.bfloat16)
    batches = (8, 16)
    inputs = {b: torch.randn(b, SEQ, DIM, device="cuda", dtype=torch.bfloat16) for b in batches}
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side), torch.no_grad():
        for b in batches:
            for _ in range(3):
                net(inputs[b])
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graphs, outputs = {}, {}
    with profile(activities=ACTIVITIES, record_shapes=True, with_stack=True, with_modules=True) as prof:
        with torch.no_grad():
            for b in batches:
                graphs[b] = torch.cuda.CUDAGraph()
                with record_function(f"capture_graph_batch_{b}"), torch.cuda.graph(graphs[b]):
                    outputs[b] = net(inputs[b])
        torch.cuda.synchronize()
    export(prof, os.path.join(out, "graph_capture.json.gz"))
    fresh = {b: torch.randn(b, SEQ, DIM, device="cuda", dtype=torch.bfloat16) for b in batches}
    with profile(activities=ACTIVITIES, record_shapes=True, with_stack=True) as prof:
        for i in range(8):
            b = batches[i % 2]
            with record_function(f"execute_model_bs_{b}"):
                inputs[b].copy_(fresh[b])
                graphs[b].replay()
                outputs[b].float().sum().item()
        torch.cuda.synchronize()
    export(prof, os.path.join(out, "graph_replay.json.gz"))


def train_step(net, opt, x, side, communicate=False):
    with record_function("forward"):
        loss = net(x).float().pow(2).mean()
    with record_function("backward"):
        loss.backward()
    event = torch.cuda.Event()
    event.record()
    with torch.cuda.stream(side):
        side.wait_event(event)
        norm = torch.stack([p.grad.norm() for p in net.parameters()]).sum()
    torch.cuda.current_stream().wait_stream(side)
    if communicate:
        all_reduce_gradients(net, x)
    with record_function("optimizer"):
        opt.step()
        opt.zero_grad(set_to_none=True)
    return loss.item() + norm.item()


def train_trace(path, steps=5, et_path=None, ffn=4, communicate=False):
    net = model(ffn)
    opt = torch.optim.AdamW(net.parameters(), lr=1e-4)
    x = torch.randn(16, SEQ, DIM, device="cuda")
    side = torch.cuda.Stream()
    for _ in range(3):
        train_step(net, opt, x, side, communicate)
    torch.cuda.synchronize()
    et = None
    if et_path:
        et = ExecutionTraceObserver().register_callback(et_path[: -len(".gz")])
    config = torch._C._profiler._ExperimentalConfig(enable_cuda_sync_events=True)
    with profile(
        activities=ACTIVITIES,
        record_shapes=True,
        with_stack=False,
        schedule=schedule(wait=0, warmup=1, active=steps),
        experimental_config=config,
        execution_trace_observer=et,
        on_trace_ready=lambda done: export(done, path),
    ) as prof:
        for _ in range(steps + 1):
            train_step(net, opt, x, side, communicate)
            torch.cuda.synchronize()
            prof.step()
    if et_path:
        raw = et_path[: -len(".gz")]
        with open(raw, "rb") as src, gzip.open(et_path, "wb") as dst:
            shutil.copyfileobj(src, dst)
        os.remove(raw)


def all_reduce_gradients(net, x):
    import torch.distributed as dist

    for p in net.parameters():
        if p.grad is not None:
            dist.all_reduce(p.grad)
    gathered = [torch.empty_like(x) for _ in range(dist.get_world_size())]
    dist.all_gather(gathered, x)


def nccl_trace(path):
    import torch.distributed as dist

    dist.init_process_group("nccl", init_method="tcp://127.0.0.1:29531", rank=0, world_size=1)
    try:
        train_trace(path, steps=4, communicate=True)
    finally:
        dist.destroy_process_group()


def graph_fork_pair(out):
    torch.manual_seed(0)
    left = torch.nn.Linear(DIM, DIM).cuda().to(torch.bfloat16)
    right = torch.nn.Linear(DIM, DIM).cuda().to(torch.bfloat16)
    x = torch.randn(16, SEQ, DIM, device="cuda", dtype=torch.bfloat16)
    branch = torch.cuda.Stream()

    def forward():
        h = torch.nn.functional.layer_norm(x, (DIM,))
        branch.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(branch):
            r = torch.relu(right(h))
        g = torch.nn.functional.gelu(left(h))
        torch.cuda.current_stream().wait_stream(branch)
        return g + r

    with torch.no_grad():
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                forward()
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with profile(activities=ACTIVITIES, record_shapes=True, with_stack=True, with_modules=True) as prof:
            with record_function("capture_graph_fork"), torch.cuda.graph(graph):
                y = forward()
            torch.cuda.synchronize()
        export(prof, os.path.join(out, "graph_fork_capture.json.gz"))
        with profile(activities=ACTIVITIES, record_shapes=True, with_stack=True) as prof:
            for i in range(6):
                with record_function(f"execute_model_fork_{i}"):
                    graph.replay()
                    y.float().sum().item()
            torch.cuda.synchronize()
        export(prof, os.path.join(out, "graph_fork_replay.json.gz"))


def waits_trace(path, steps=4):
    """Event waits whose record the trace may not name: an event recorded on a stream the thread last launched on
    (e2), one recorded on another stream than the thread's last launch (e3), a wait that holds a kernel back (e1:
    the side stream's multiply waits for the matmul), and an Event Sync (e2.synchronize())."""
    x = torch.randn(8192, 8192, device="cuda")
    side, other = torch.cuda.Stream(), torch.cuda.Stream()
    main_stream = torch.cuda.current_stream()

    def step():
        with record_function("waits_step"):
            x @ x
            e1 = torch.cuda.Event()
            e1.record()
            side.wait_event(e1)
            with torch.cuda.stream(side):
                x[:64] * 2
            with torch.cuda.stream(other):
                x @ x
            e2 = torch.cuda.Event()
            e2.record(other)
            x + 1
            e3 = torch.cuda.Event()
            e3.record(other)
            main_stream.wait_event(e3)
            x * 3
            e2.synchronize()
            torch.cuda.synchronize()

    for _ in range(2):
        step()
    config = torch._C._profiler._ExperimentalConfig(enable_cuda_sync_events=True)
    with profile(activities=ACTIVITIES, record_shapes=True, schedule=schedule(wait=0, warmup=1, active=steps),
                 experimental_config=config, on_trace_ready=lambda done: export(done, path)) as prof:
        for _ in range(steps + 1):
            step()
            prof.step()


def main(out, names):
    os.makedirs(out, exist_ok=True)
    info = {
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "device": torch.cuda.get_device_name(0),
        "capability": list(torch.cuda.get_device_capability(0)),
    }
    parts = {
        "graph_pair": lambda: graph_pair(out),
        "graph_fork": lambda: graph_fork_pair(out),
        "nccl": lambda: nccl_trace(os.path.join(out, "nccl_rank0of1.json.gz")),
        "wide": lambda: train_trace(os.path.join(out, "changed_wide.json.gz"), steps=6, ffn=8),
        "noise_c": lambda: train_trace(os.path.join(out, "noise_c.json.gz"), steps=6),
        "waits": lambda: waits_trace(os.path.join(out, "waits.json.gz")),
        "et_train": lambda: train_trace(
            os.path.join(out, "kineto_train.json.gz"), et_path=os.path.join(out, "et_train.json.gz")
        ),
        "noise_a": lambda: train_trace(os.path.join(out, "noise_a.json.gz"), steps=6),
        "noise_b": lambda: train_trace(os.path.join(out, "noise_b.json.gz"), steps=6),
    }
    recorded = os.path.join(out, "recorded.json")
    if os.path.exists(recorded):
        with open(recorded) as f:
            info = {**json.load(f), **info}
    for name in names or ["graph_pair", "et_train", "noise_a", "noise_b"]:
        part = parts[name]
        try:
            part()
            info[name] = "ok"
        except Exception:
            traceback.print_exc()
            info[name] = "failed"
    with open(recorded, "w") as f:
        json.dump(info, f, indent=1)
    print(json.dumps(info))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
