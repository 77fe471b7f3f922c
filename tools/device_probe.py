"""Kernel probe for a GPU machine: correctness vs tq_core at medium sizes, then timings.

Usage (repository root): PYTHONPATH=packages/tq-core/src:packages/tq-triton/src python tools/device_probe.py [--quick]
"""

from __future__ import annotations

import argparse
import itertools
import os
import sys
import time

import torch

import tq_core
import tq_triton
from tq_triton import bench


def check_correctness(dev: torch.device, quick: bool) -> int:
    fails = 0
    gen = torch.Generator(device=dev).manual_seed(int.from_bytes(os.urandom(4), "little"))
    combos = list(itertools.product(tq_core.PRESETS, (64, 128, 256), (1, 4, 8), (16, 128)))
    if quick:
        combos = combos[::5]
    for preset, d, group, bs in combos:
        hk = 2
        hq = hk * group
        seq = [1, 7, 300, 1029, 4096, 65]
        qls = [1, 1, 8, 16, 3, 65]  # last: q_len == seq_len (a prefill-like chunk)
        nb_per = [(s + bs - 1) // bs for s in seq]
        nblocks = sum(nb_per) + 3
        slot = tq_core.get_preset(preset).layout(d).slot_size_aligned
        cache = torch.zeros(nblocks, bs, hk, slot, dtype=torch.uint8, device=dev)
        perm = torch.randperm(nblocks, device=dev, generator=gen)
        table = torch.zeros(len(seq), max(nb_per), dtype=torch.int32, device=dev)
        used = 0
        for r, s in enumerate(seq):
            ids = perm[used : used + nb_per[r]]
            used += nb_per[r]
            table[r, : nb_per[r]] = ids.int()
            k = torch.randn(s, hk, d, device=dev, generator=gen, dtype=torch.float32).to(torch.bfloat16) * 2
            v = torch.randn(s, hk, d, device=dev, generator=gen, dtype=torch.float32).to(torch.bfloat16)
            pos = torch.arange(s, device=dev)
            slots = ids[pos // bs] * bs + pos % bs
            ref_cache = cache.clone()
            tq_core.store(k, v, ref_cache, slots, preset)
            tq_triton.store(k, v, cache, slots, preset)
            same = (ref_cache == cache).float().mean().item()
            if same < 0.999:
                print(f"STORE MISMATCH {preset} d={d} bs={bs}: identical fraction {same:.5f}")
                fails += 1
        qsl = torch.tensor([0, *torch.tensor(qls).cumsum(0).tolist()], dtype=torch.int32, device=dev)
        seq_t = torch.tensor(seq, dtype=torch.int32, device=dev)
        q = torch.randn(sum(qls), hq, d, device=dev, generator=gen).to(torch.bfloat16)
        ref = tq_core.attention(q.float(), cache, table, seq_t, qsl, preset, d**-0.5)
        for splits in (1, 7, 32):
            out = torch.full_like(q, float("nan"))
            tq_triton.attention(q, cache, table, seq_t, qsl, preset, d**-0.5, out=out, num_kv_splits=splits)
            err = ((out.float() - ref).norm() / ref.norm()).item()
            bad = (not torch.isfinite(out).all()) or err > 1e-2
            if bad:
                fails += 1
                print(f"ATTN FAIL {preset} d={d} G={group} bs={bs} splits={splits}: rel err {err:.2e}")
    print(f"correctness: {len(combos)} combos, {fails} failures")
    return fails


def perf(dev: torch.device, shapes: list[str], presets: list[str], variants: list[dict]) -> None:
    bw = bench.copy_bandwidth_gbs(dev)
    print(f"copy bandwidth {bw:.0f} GB/s")
    rows = []
    for sname in shapes:
        shape = bench.SHAPES[sname]
        base = None
        for i, preset in enumerate(presets):
            case = bench.build_case(shape, preset, dev, seed=1, dense=(i == 0 and not shape.q_lens))
            if i == 0 and case.dense_k is not None:
                fn, backend = bench.sdpa_bf16(case)
                base = bench.time_ms(fn)
                rows.append((sname, "bf16-sdpa", backend, base, case.bf16_bytes_read / base / 1e6, 1.0))
                case.dense_k = case.dense_v = None
                torch.cuda.empty_cache()
            for var in variants:
                env_backup = {}
                for k, v in var.items():
                    env_backup[k] = os.environ.get(k)
                    os.environ[k] = str(v)
                try:
                    t = bench.time_ms(lambda case=case: bench.run_tq(case))
                except Exception as exc:  # report and continue with the next variant
                    print(f"  {sname} {preset} {var}: {type(exc).__name__}: {exc}"[:300])
                    continue
                finally:
                    for k, v in env_backup.items():
                        if v is None:
                            os.environ.pop(k, None)
                        else:
                            os.environ[k] = v
                gbs = case.cache_bytes_read / t / 1e6
                rows.append((sname, preset, str(var), t, gbs, (base / t) if base else float("nan")))
            if shape.q_len > 1 and not shape.q_lens:
                for label, mk in (("looped", bench.looped_per_token), ("batched", bench.batched_per_token)):
                    t = bench.time_ms(mk(case))
                    rows.append(
                        (
                            sname,
                            preset,
                            label,
                            t,
                            case.cache_bytes_read * (shape.q_len if label != "x" else 1) / t / 1e6,
                            (base / t) if base else float("nan"),
                        )
                    )
            case = None
            torch.cuda.empty_cache()
    print(f"{'shape':12} {'impl':20} {'variant':48} {'ms':>8} {'GB/s':>7} {'%bw':>5} {'x bf16':>7}")
    for s, impl, var, t, gbs, ratio in rows:
        print(f"{s:12} {impl:20} {var[:48]:48} {t:8.4f} {gbs:7.0f} {100 * gbs / bw:5.1f} {ratio:7.2f}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--skip-check", action="store_true")
    ap.add_argument("--shapes", default="decode-32k,verify-32k,poc")
    ap.add_argument("--presets", default="turboquant_k3v4_nc,turboquant_k8v4")
    ap.add_argument("--variants", default="")
    a = ap.parse_args()
    dev = torch.device("cuda")
    print(torch.__version__, torch.cuda.get_device_name(), "triton", __import__("triton").__version__)
    t0 = time.time()
    fails = 0 if a.skip_check else check_correctness(dev, a.quick)
    print(f"check took {time.time() - t0:.0f}s")
    variants = [eval(v) for v in a.variants.split(";")] if a.variants else [{}]
    perf(dev, a.shapes.split(","), a.presets.split(","), variants)
    sys.exit(1 if fails else 0)


if __name__ == "__main__":
    main()
