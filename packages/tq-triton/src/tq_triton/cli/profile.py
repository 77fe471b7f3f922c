"""tq profile: launches, GPU time per kernel and CPU dispatch time for one shape.

Runs tq_triton.attention on one named benchmark shape under torch.profiler and prints
the kernel launches per call, each kernel's GPU time and the CPU time to dispatch a
call. Needs a cuda or xpu GPU.
"""

from __future__ import annotations

import argparse
import time

import torch

from tq_core.cli.argtypes import positive_int
from tq_core.cli.options import add_command, add_preset_option

from .. import bench
from . import gpu_device


def register(subparsers: argparse._SubParsersAction) -> None:
    p = add_command(
        subparsers, "profile", help="torch.profiler summary of tq_triton.attention on one shape", doc=__doc__
    )
    p.add_argument(
        "--shape",
        default="decode-32k",
        choices=sorted(bench.SHAPES),
        help="benchmark shape, as in tq bench (default decode-32k)",
    )
    add_preset_option(p, default="turboquant_k3v4_nc")
    p.add_argument("--iters", type=positive_int, default=20, help="calls timed and profiled (default 20)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from torch.profiler import ProfilerActivity, profile

    dev = gpu_device()
    case = bench.build_case(bench.SHAPES[args.shape], args.preset, dev, seed=0)
    out = torch.empty_like(case.query)
    for _ in range(3):
        bench.run_tq(case, out=out)
    sync = torch.cuda.synchronize if dev.type == "cuda" else torch.xpu.synchronize
    sync()
    t0 = time.perf_counter()
    for _ in range(args.iters):
        bench.run_tq(case, out=out)
    dispatch_us = (time.perf_counter() - t0) / args.iters * 1e6
    sync()
    acts = [ProfilerActivity.CPU, ProfilerActivity.CUDA if dev.type == "cuda" else ProfilerActivity.XPU]
    with profile(activities=acts) as prof:
        for _ in range(args.iters):
            bench.run_tq(case, out=out)
        sync()
    kernels: dict[str, list[float]] = {}
    for ev in prof.events():
        if ev.device_type.name in ("CUDA", "XPU") and ev.name and not ev.name.startswith("Memcpy"):
            kernels.setdefault(ev.name, []).append(ev.device_time_total if hasattr(ev, "device_time_total") else 0.0)
    launches = sum(len(v) for v in kernels.values()) / args.iters
    print(f"{args.shape} {args.preset}: {launches:.1f} launches per call, CPU dispatch {dispatch_us:.1f} us per call")
    print(f"{'kernel':60} {'calls/iter':>10} {'GPU us/call':>12}")
    for name, times in sorted(kernels.items(), key=lambda kv: -sum(kv[1])):
        print(f"{name[:60]:60} {len(times) / args.iters:10.1f} {sum(times) / len(times):12.1f}")
    return 0
