"""Compile tq-triton's portable attention kernel for sm_90 without a GPU (PTX and cubin via
the Triton wheel's ptxas), with the register tables on (KEY_LUT/VALUE_LUT 1: inline PTX).

Run from anywhere with tq-core and tq-triton importable: ``python sm90_compile.py``.
"""

import inspect
import json

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

import tq_core
from tq_triton.attention.kernel import attention_kernel
from tq_triton.attention.plan import kernel_constexprs, next_pow2, plan_block_q
from tq_triton.tuning import AttentionConfig

CASES = [("turboquant_4bit_nc", 128, 4, 1), ("tq_k4v4", 128, 4, 1), ("tq_k4v4", 128, 4, 16), ("tq_k4v3", 64, 4, 8)]
CALIBRATION = ("KeyGain", "KeyOffset", "KeyFirstOffset", "ValueGain", "ValueOffset", "ValueFirstOffset")

out = []
for name, d, g, qlen in CASES:
    p = tq_core.get_preset(name)
    fields = p.kernel_fields(p.block_layout(d, 16, 2)).constexprs()
    cfg = AttentionConfig()
    block_q = plan_block_q(next_pow2(g), qlen, cfg.min_rows)
    cx = kernel_constexprs(
        p, fields, cfg, g, 2 * g, 4, block_q, saturate_query=False, key_lut=1, value_lut=1 if p.calibrated else 0
    )
    types = {
        "Q": "*bf16",
        "Cache": "*u8",
        "BlockTable": "*i32",
        "SeqLens": "*i32",
        "QueryStart": "*i32",
        "Centroids": "*i32",
        "Out": "*bf16",
        "Partial": "*fp32",
        "Lse": "*fp32",
        "q_mul": "fp32",
        "q_scale": "fp32",
        "VCentroids": "*i32" if p.calibrated else "*fp16",
    } | dict.fromkeys(CALIBRATION, "*fp32")
    sig, consts = {}, {}
    for i, n in enumerate(inspect.signature(attention_kernel.fn).parameters):
        sig[n] = "constexpr" if n in cx else types.get(n, "i32")
        if n in cx:
            consts[(i,)] = cx[n]
    target = GPUTarget("cuda", 90, 32)
    k = triton.compile(ASTSource(attention_kernel, sig, consts), target=target, options={"num_warps": cfg.num_warps})
    ptx = k.asm["ptx"]
    out.append(
        {
            "case": f"{name} d{d} g{g} q{qlen}",
            "cubin_bytes": len(k.asm["cubin"]),
            "prmt": ptx.count("prmt.b32"),
            "sign_selectors": "0x80c0" in ptx and "0x90d0" in ptx,
        }
    )
print(json.dumps(out, indent=0))
