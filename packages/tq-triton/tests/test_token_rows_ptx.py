"""The token-rows kernel's inline PTX (``nvidia/token_rows_ptx.py``) run on the host by a
model of one warp: each of the 32 lanes runs the block line by line in lockstep, and the
warp-wide ``mma.sync`` m16n8k16 and ``movmatrix`` gather and scatter the fragments as the
PTX ISA lays them out. Each lane gets the operands that ``token_rows_ptx``'s docstring says
it holds (the kernel's loads give them the same on the GPU, where test_token_rows_kernel
checks the whole kernel against tq-core), and the results must equal products computed
directly from the codes: scores of 3-bit, 4-bit and fp8 keys with a query, the centroid
norms, and the value product of 4-bit codes with transposed probabilities."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch
from test_key_lut import _b32, _f16x2, prmt

import tq_core
from tq_triton.device_tensors import codebook
from tq_triton.key_lut import lut_words
from tq_triton.nvidia import token_rows_ptx as ptx
from tq_triton.value_words import nibbles_fn

MASK = 0xFFFFFFFF


def _lop3(a: int, b: int, c: int, imm: int) -> int:
    out = 0
    for i in range(8):
        if imm >> i & 1:
            out |= (a if i & 4 else ~a) & (b if i & 2 else ~b) & (c if i & 1 else ~c)
    return out & MASK


def _e4m3x2(h: int) -> int:
    """``cvt.rn.f16x2.e4m3x2`` of a 16-bit pair (low byte to the low half)."""
    pair = torch.tensor([h & 0xFF, h >> 8], dtype=torch.uint8).view(torch.float8_e4m3fn)
    return _b32(pair.to(torch.float32).numpy())


def _frag(regs: list[int]) -> np.ndarray:
    return np.concatenate([_f16x2(r).astype(np.float64) for r in regs])


def _mma(lanes: list[dict], a: list[str], b: list[str], c: list[str], d: list[str]) -> None:
    """``mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32`` over the warp's lanes."""
    ma, mb, mc = np.zeros((16, 16)), np.zeros((16, 8)), np.zeros((16, 8))
    for lane, regs in enumerate(lanes):
        g, t = divmod(lane, 4)
        fa = _frag([regs[r] for r in a])
        for j in range(2):
            ma[g, 2 * t + j], ma[g + 8, 2 * t + j] = fa[j], fa[2 + j]
            ma[g, 2 * t + 8 + j], ma[g + 8, 2 * t + 8 + j] = fa[4 + j], fa[6 + j]
            mb[2 * t + j, g] = _f16x2(regs[b[0]])[j]
            mb[2 * t + 8 + j, g] = _f16x2(regs[b[1]])[j]
            mc[g, 2 * t + j], mc[g + 8, 2 * t + j] = regs[c[j]], regs[c[2 + j]]
    md = ma @ mb + mc
    for lane, regs in enumerate(lanes):
        g, t = divmod(lane, 4)
        for j in range(2):
            regs[d[j]], regs[d[2 + j]] = float(md[g, 2 * t + j]), float(md[g + 8, 2 * t + j])


def _movmatrix(lanes: list[dict], d: str, x: str) -> None:
    m = np.zeros((8, 8), dtype=np.float16)
    for lane, regs in enumerate(lanes):
        g, t = divmod(lane, 4)
        m[g, 2 * t : 2 * t + 2] = _f16x2(regs[x])
    for lane, regs in enumerate(lanes):
        g, t = divmod(lane, 4)
        regs[d] = _b32(m.T[g, 2 * t : 2 * t + 2])


def run_warp(text: str, operands: list[dict[int, int | float]]) -> list[dict[int, int | float]]:
    """``text`` run by 32 lanes in lockstep, lane ``l`` on ``operands[l]`` (``$n`` -> a
    32-bit value, or a float for float32 operands). Returns each lane's ``$n`` it writes."""
    lanes = [{f"${n}": v for n, v in ops.items()} for ops in operands]

    def val(regs: dict, x: str) -> int | float:
        return regs[x] if x in regs else int(x, 0)

    for line in re.split(r"[;\n]", text):
        line = line.strip()
        line = line[1:].strip() if line.startswith("{") else line  # a block's opening brace
        if not line or line == "}" or line.startswith(".reg"):
            continue
        op, args = line.split(None, 1)
        if op.startswith("mma.sync"):
            groups = [g.split(", ") for g in re.findall(r"\{([^}]*)\}", args)]
            _mma(lanes, groups[1], groups[2], groups[3], groups[0])
            continue
        if op.startswith("movmatrix"):
            _movmatrix(lanes, *[a.strip() for a in args.split(",")])
            continue
        for regs in lanes:
            split = re.fullmatch(r"\{(\S+), (\S+)\}, (\S+)", args)
            if op == "mov.b32" and split:
                lo, hi, src = split.groups()
                regs[lo], regs[hi] = val(regs, src) & 0xFFFF, val(regs, src) >> 16
                continue
            joined = re.fullmatch(r"(\S+), \{(\S+), (\S+)\}", args)
            if op == "mov.b64" and joined:
                d, lo, hi = joined.groups()
                regs[d] = val(regs, lo) | (val(regs, hi) << 32)
                continue
            d, *src = [a.strip() for a in args.split(",")]
            x = [val(regs, a) for a in src]
            if op in ("mov.b32", "mov.f32"):
                regs[d] = x[0]
            elif op in ("shr.b32", "shr.b64"):
                regs[d] = x[0] >> x[1]
            elif op == "cvt.u32.u64":
                regs[d] = x[0] & MASK
            elif op == "shl.b32":
                regs[d] = (x[0] << x[1]) & MASK
            elif op == "shf.r.wrap.b32":
                regs[d] = (((x[1] << 32) | x[0]) >> (x[2] & 31)) & MASK
            elif op == "lop3.b32":
                regs[d] = _lop3(*x)
            elif op == "and.b32":
                regs[d] = x[0] & x[1]
            elif op == "xor.b32":
                regs[d] = x[0] ^ x[1]
            elif op == "not.b32":
                regs[d] = ~x[0] & MASK
            elif op == "mul.lo.u32":
                regs[d] = (x[0] * x[1]) & MASK
            elif op == "prmt.b32":
                regs[d] = prmt(*x)
            elif op == "mul.rn.f16x2":
                regs[d] = _b32(_f16x2(x[0]) * _f16x2(x[1]))
            elif op == "sub.rn.f16x2":
                regs[d] = _b32(_f16x2(x[0]) - _f16x2(x[1]))
            elif op == "fma.rn.f16x2":
                f = [_f16x2(v).astype(np.float64) for v in x]
                regs[d] = _b32(f[0] * f[1] + f[2])
            elif op == "cvt.f32.f16":
                regs[d] = float(np.array([x[0]], dtype=np.uint16).view(np.float16)[0])
            elif op == "cvt.rn.f16x2.f32":
                regs[d] = _b32(np.array([x[1], x[0]], dtype=np.float32))
            elif op == "cvt.rn.f16x2.e4m3x2":
                regs[d] = _e4m3x2(x[0])
            elif op == "add.f32":
                regs[d] = float(np.float32(x[0]) + np.float32(x[1]))
            else:
                raise AssertionError(f"the warp model has no {op}")
    return [
        {int(k[1:]): v for k, v in regs.items() if k[0] == "$" and int(k[1:]) not in ops}
        for regs, ops in zip(lanes, operands, strict=True)
    ]


def _fp16_bits(x: np.ndarray) -> list[int]:
    return [int(v) for v in x.astype(np.float16).view(np.uint16)]


def _query_pairs(q16: np.ndarray, col: int, c: int) -> list[int]:
    """The query B registers of column ``col`` for lane ``(col % 8, c)``, the 8 score steps
    (pairs ``32 c + 2 e``)."""
    bits = _fp16_bits(q16[col, 32 * c : 32 * c + 32])
    return [bits[2 * e] | (bits[2 * e + 1] << 16) for e in range(16)]


def _scores(text_halves, lane_words, lut, q16, nct=1):
    """Both halves of a score block over the warp, ``nct`` column tiles of 8 queries (``q16``
    ``[8 nct, 128]``); returns S^T [16, 8 nct] and the sums of each key row [16] that the
    lanes carry out (each lane holds its row's, and the four lanes of a row must agree)."""
    n = 4 * nct
    s = np.zeros((16, 8 * nct))
    sq = np.zeros(16)
    outs = [dict.fromkeys(range(n + 2), 0.0) for _ in range(32)]
    for half, (text, words_of) in enumerate(text_halves):
        ops = []
        for lane in range(32):
            g, c = divmod(lane, 4)
            w = words_of(lane_words(g, c))
            first = n + 2 + len(w) + len(lut)
            o = {n + 2 + i: v for i, v in enumerate(w)}
            o |= {n + 2 + len(w) + i: v for i, v in enumerate(lut)}
            for k in range(nct):
                qp = _query_pairs(q16, 8 * k + g, c)[8 * half : 8 * half + 8]
                o |= {first + 8 * k + i: v for i, v in enumerate(qp)}
            o |= {first + 8 * nct + i: outs[lane][i] for i in range(n + 2)}
            ops.append(o)
        outs = run_warp(text, ops)
    for lane, out in enumerate(outs):
        g, c = divmod(lane, 4)
        for k in range(nct):
            for j in range(2):
                s[g, 8 * k + 2 * c + j], s[g + 8, 8 * k + 2 * c + j] = out[4 * k + j], out[4 * k + 2 + j]
        assert (out[n], out[n + 1]) == (outs[4 * g][n], outs[4 * g][n + 1]), lane
        sq[g], sq[g + 8] = out[n], out[n + 1]
    return s, sq


def _queries(gen: np.random.Generator, nct: int = 1) -> np.ndarray:
    return gen.standard_normal((8 * nct, 128)).astype(np.float16)


@pytest.mark.parametrize("norms", [False, True])
@pytest.mark.parametrize("nct", [1, 2])
@pytest.mark.parametrize("seed", [0, 1])
def test_3_bit_key_scores_and_norms(seed, nct, norms):
    gen = np.random.default_rng(seed)
    cent = codebook(tq_core.get_preset("turboquant_k3v4_nc"), 128, torch.device("cpu"))[2]
    lut = [v & MASK for v in lut_words(cent).tolist()]
    codes = gen.integers(0, 8, (16, 128))
    codes[3] = 7  # a row of one code, and the codebook's extremes
    codes[5, :64] = 0
    q16 = _queries(gen, nct)

    def chunk_words(token: int, c: int) -> list[int]:
        stream = sum(int(codes[token, 32 * c + i]) << (3 * i) for i in range(32))
        return [(stream >> (32 * k)) & MASK for k in range(3)]

    def lane_words(g: int, c: int) -> list[int]:
        return chunk_words(g, c) + chunk_words(g + 8, c)

    halves = [(ptx.qk3_ptx(h, nct, norms), lambda w: w) for h in (0, 1)]
    s, sq = _scores(halves, lane_words, lut, q16, nct)
    k = cent.float().numpy()[codes].astype(np.float64)
    want = k @ q16.astype(np.float64).T
    np.testing.assert_allclose(s, want, rtol=1e-6, atol=1e-6)
    # the norms: fp16 squares summed on the matrix unit; without, the zero sums pass through
    np.testing.assert_allclose(sq, (k**2).sum(axis=1) if norms else 0.0, rtol=2e-3)


@pytest.mark.parametrize("norms", [False, True])
@pytest.mark.parametrize("nct", [1, 2])
@pytest.mark.parametrize("seed", [0, 1])
def test_4_bit_key_scores_and_norms(seed, nct, norms):
    gen = np.random.default_rng(seed)
    cent = codebook(tq_core.get_preset("turboquant_4bit_nc"), 128, torch.device("cpu"))[2]
    lut = [v & MASK for v in lut_words(cent).tolist()]
    codes = gen.integers(0, 16, (16, 128))
    codes[2] = np.arange(128) % 16
    q16 = _queries(gen, nct)

    def chunk_words(token: int, c: int) -> list[int]:
        return [sum(int(codes[token, 32 * c + 8 * w + i]) << (4 * i) for i in range(8)) for w in range(4)]

    def lane_words(g: int, c: int) -> list[int]:
        return chunk_words(g, c) + chunk_words(g + 8, c)

    # each half takes words 2 h, 2 h + 1 of both key rows
    halves = [
        (ptx.qk4_ptx(nct, norms), lambda w: [w[0], w[1], w[4], w[5]]),
        (ptx.qk4_ptx(nct, norms), lambda w: [w[2], w[3], w[6], w[7]]),
    ]
    s, sq = _scores(halves, lane_words, lut, q16, nct)
    k = cent.float().numpy()[codes].astype(np.float64)
    np.testing.assert_allclose(s, k @ q16.astype(np.float64).T, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(sq, (k**2).sum(axis=1) if norms else 0.0, rtol=2e-3)


@pytest.mark.parametrize("nct", [1, 2])
def test_fp8_key_scores(nct):
    gen = np.random.default_rng(3)
    keys = torch.from_numpy(gen.standard_normal((16, 128)).astype(np.float32)).to(torch.float8_e4m3fn)
    raw = keys.view(torch.uint8).numpy().astype(np.int64)
    q16 = _queries(gen, nct)
    n = 4 * nct

    def chunk_words(token: int, c: int) -> list[int]:
        b = raw[token, 32 * c : 32 * c + 32]
        return [int(b[4 * w] | b[4 * w + 1] << 8 | b[4 * w + 2] << 16 | b[4 * w + 3] << 24) for w in range(8)]

    outs = [dict.fromkeys(range(n), 0.0) for _ in range(32)]
    for half in range(2):
        ops = []
        for lane in range(32):
            g, c = divmod(lane, 4)
            wg, wk = chunk_words(g, c)[4 * half : 4 * half + 4], chunk_words(g + 8, c)[4 * half : 4 * half + 4]
            qp = [v for k in range(nct) for v in _query_pairs(q16, 8 * k + g, c)[8 * half : 8 * half + 8]]
            vals = [*wg, *wk, *qp, *(outs[lane][i] for i in range(n))]
            ops.append({n + i: v for i, v in enumerate(vals)})
        outs = run_warp(ptx.qk8_ptx(nct), ops)
    s = np.zeros((16, 8 * nct))
    for lane, out in enumerate(outs):
        g, c = divmod(lane, 4)
        for k in range(nct):
            for j in range(2):
                s[g, 8 * k + 2 * c + j], s[g + 8, 8 * k + 2 * c + j] = out[4 * k + j], out[4 * k + 2 + j]
    want = keys.to(torch.float64).numpy() @ q16.astype(np.float64).T
    np.testing.assert_allclose(s, want, rtol=1e-6, atol=1e-6)


def _probability_b_regs(p: np.ndarray, nct: int) -> list[list[list[int]]]:
    """Probabilities ``p`` ``[16, 8 nct]`` in the score's C layout transposed into the value
    product's B registers (PAIR_TRANSPOSED_PTX): ``[column tile][key rows g (tokens 0-7) or
    g + 8 (8-15)][lane]``."""
    b_regs = []
    for k in range(nct):
        b_regs.append([])
        for h in range(2):
            ops = []
            for lane in range(32):
                g, c = divmod(lane, 4)
                ops.append({1: float(p[g + 8 * h, 8 * k + 2 * c]), 2: float(p[g + 8 * h, 8 * k + 2 * c + 1])})
            b_regs[k].append([out[0] for out in run_warp(ptx.PAIR_TRANSPOSED_PTX, ops)])
    return b_regs


def _value_product(text: str, p: np.ndarray, nct: int, value_operands) -> np.ndarray:
    """``O^T`` ``[128, 8 nct]`` of a value step's PTX ``text`` run for the 8 row tiles ``u`` of
    a 16-token tile, the probabilities ``p`` transposed into its ``B`` registers first:
    ``value_operands(u, g, c)`` gives lane ``(g, c)``'s operands before them; row ``g`` of tile
    ``u`` is head_dim ``16 g + 2 u``, row ``g + 8`` is ``16 g + 2 u + 1``."""
    n = 4 * nct
    b_regs = _probability_b_regs(p, nct)
    got = np.zeros((128, 8 * nct))
    for u in range(8):
        ops = []
        for lane in range(32):
            g, c = divmod(lane, 4)
            vals = value_operands(u, g, c)
            vals += [b_regs[k][h][lane] for k in range(nct) for h in range(2)] + [0.0] * n
            ops.append({n + i: v for i, v in enumerate(vals)})
        for lane, out in enumerate(run_warp(text, ops)):
            g, c = divmod(lane, 4)
            for k in range(nct):
                for j in range(2):
                    got[16 * g + 2 * u, 8 * k + 2 * c + j] = out[4 * k + j]
                    got[16 * g + 2 * u + 1, 8 * k + 2 * c + j] = out[4 * k + 2 + j]
    return got


@pytest.mark.parametrize("nct", [1, 2])
def test_transposed_probabilities_times_4_bit_values(nct):
    # the probabilities of a 16-token row tile in the score's C layout, transposed into the
    # value product's B registers (PAIR_TRANSPOSED_PTX), then O^T = V^T P^T for every row tile
    # u: row g of tile u is head_dim 16 g + 2 u, row g + 8 is 16 g + 2 u + 1; nct column tiles
    # of 8 queries share each decoded value word
    gen = np.random.default_rng(5)
    p = gen.random((16, 8 * nct)).astype(np.float32)
    codes = gen.integers(0, 16, (16, 128))
    codes[0] = 15
    codes[9] = 0

    def word(token: int, w: int) -> int:
        return sum(int(codes[token, 8 * w + i]) << (4 * i) for i in range(8))

    def operands(u: int, g: int, c: int) -> list[int]:
        toks = (2 * c, 2 * c + 1, 2 * c + 8, 2 * c + 9)
        return [word(t, 2 * g + u // 4) for t in toks] + [(u % 4) | ((u % 4 + 4) << 8)]

    got = _value_product(ptx.pv4_ptx(nct), p, nct, operands)
    want = (codes - 8).T.astype(np.float64) @ p.astype(np.float16).astype(np.float64)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-5)


@pytest.mark.parametrize("nct", [1, 2])
def test_transposed_probabilities_times_symmetric_values(nct):
    """``pv4_ptx(symmetric=True)``: tq_k4v4's codes as ``code - 7.5`` (the format's table entry
    ``(2 code - 15) / 16`` times 8), both nibbles, against NumPy."""
    gen = np.random.default_rng(6)
    p = gen.random((16, 8 * nct)).astype(np.float32)
    codes = gen.integers(0, 16, (16, 128))
    codes[0] = 15
    codes[9] = 0
    codes[3, ::2] = 0  # low nibbles at both ends, high nibbles at the other
    codes[3, 1::2] = 15

    def word(token: int, w: int) -> int:
        return sum(int(codes[token, 8 * w + i]) << (4 * i) for i in range(8))

    def operands(u: int, g: int, c: int) -> list[int]:
        toks = (2 * c, 2 * c + 1, 2 * c + 8, 2 * c + 9)
        return [word(t, 2 * g + u // 4) for t in toks] + [(u % 4) | ((u % 4 + 4) << 8)]

    got = _value_product(ptx.pv4_ptx(nct, symmetric=True), p, nct, operands)
    table = tq_core.value_codebook("tq_k4v4", 128)[0].double().numpy()
    want = (8 * table[codes]).T @ p.astype(np.float16).astype(np.float64)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-5)


def test_symmetric_pairs_in_head_dim_order():
    """``token_rows_ptx.SYMMETRIC_PAIRS_PTX`` (the Gluon kernel's ``int_values``): the four codes
    in bits 0-15 of each lane's word as fp16 ``8 * table[code]`` (``code - 7.5``), in order,
    whatever bits 16-31 hold."""
    gen = np.random.default_rng(7)
    words = [int(w) for w in gen.integers(0, 1 << 32, 28, dtype=np.uint64)]
    words += [0x0000, 0xFFFF, 0xFFFF0000, 0x8F0F7]  # every code 0, every code 15, codes above bit 15
    table = tq_core.value_codebook("tq_k4v4", 128)[0].double().numpy()
    out = run_warp(ptx.SYMMETRIC_PAIRS_PTX, [{2: w} for w in words])
    for w, regs in zip(words, out, strict=True):
        got = np.concatenate([_f16x2(regs[0]), _f16x2(regs[1])]).astype(np.float64)
        codes = [(w >> (4 * k)) & 15 for k in range(4)]
        np.testing.assert_array_equal(got, 8 * table[codes], err_msg=hex(w))


@pytest.mark.parametrize("nct", [1, 2])
def test_transposed_probabilities_times_3_bit_values(nct):
    # as above for 3-bit values: thread (g, c) holds each of its tokens' codes of head_dim
    # 16 g .. 16 g + 15 as 48 bits (code e at bit 3 e) in two registers; row tile u takes
    # codes 2 u (row g) and 2 u + 1 (row g + 8) at shift 6 u
    gen = np.random.default_rng(7)
    p = gen.random((16, 8 * nct)).astype(np.float32)
    codes = gen.integers(0, 8, (16, 128))
    codes[0] = 7
    codes[9] = 0
    codes[4, 16 * np.arange(8) + 10] = 5  # codes that straddle the first register

    def bits48(token: int, g: int) -> int:
        return sum(int(codes[token, 16 * g + e]) << (3 * e) for e in range(16))

    def operands(u: int, g: int, c: int) -> list[int]:
        vals = []
        for t in (2 * c, 2 * c + 1, 2 * c + 8, 2 * c + 9):
            vals += [bits48(t, g) & MASK, bits48(t, g) >> 32]
        return [*vals, 6 * u]

    got = _value_product(ptx.pv3_ptx(nct), p, nct, operands)
    want = (codes - 4).T.astype(np.float64) @ p.astype(np.float16).astype(np.float64)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-5)


@pytest.mark.parametrize("nct", [1, 2])
def test_transposed_probabilities_times_lloyd_max_values(nct):
    # tq_k4v3's values: 3-bit codes spread to nibbles, looked up in the value codebook's
    # 8-entry register table straight into the value product's A registers
    gen = np.random.default_rng(11)
    p = gen.random((16, 8 * nct)).astype(np.float32)
    cent = np.sort(gen.uniform(-2.0, 2.0, 8)).astype(np.float16)
    codes = gen.integers(0, 8, (16, 128))
    codes[5] = 7
    codes[9] = 0
    lut = [v & MASK for v in lut_words(torch.from_numpy(cent)).tolist()]

    def word(token: int, w: int) -> int:
        return sum(int(codes[token, 8 * w + i]) << (4 * i) for i in range(8))

    def operands(u: int, g: int, c: int) -> list[int]:
        k = u % 4
        words = [word(t, 2 * g + u // 4) for t in (2 * c, 2 * c + 1, 2 * c + 8, 2 * c + 9)]
        return [*words, k | ((k + 4) << 8), k | ((k + 4) << 4), *lut]

    got = _value_product(ptx.pvl_ptx(nct), p, nct, operands)
    want = cent.astype(np.float64)[codes].T @ p.astype(np.float16).astype(np.float64)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-5)


def test_3_bit_value_words_as_the_kernel_reads_them():
    # the token-rows kernel's 3-bit value reads against tq-core's packing: thread g's 16 codes
    # (head_dim 16 g .. 16 g + 15) are the 48 bits at byte 6 g, read as half-words 3 g .. 3 g + 2
    # (bits 0-31, 32-47); calibrated formats spread codes 0-7 and 8-15 of them to nibbles
    # (value_words.nibbles_fn, the function the kernel compiles)
    gen = np.random.default_rng(13)
    codes = torch.from_numpy(gen.integers(0, 8, (4, 128))).to(torch.uint8)
    codes[0] = 7
    packed = tq_core.bitpack.pack_codes(codes, 3).numpy()
    assert packed.shape == (4, 48)
    for t in range(4):
        for g in range(8):
            half = [int(packed[t, 6 * g + 2 * i]) | int(packed[t, 6 * g + 2 * i + 1]) << 8 for i in range(3)]
            lo, hi = half[0] | (half[1] << 16), half[2]
            bits = lo | (hi << 32)
            want = [int(c) for c in codes[t, 16 * g : 16 * g + 16]]
            assert [(bits >> (3 * e)) & 7 for e in range(16)] == want, (t, g)
            for word, first in ((nibbles_fn(lo), 0), (nibbles_fn(((lo >> 24) & 0xFF) | (hi << 8)), 8)):
                word &= MASK
                assert [(word >> (4 * i)) & 15 for i in range(8)] == want[first : first + 8], (t, g, first)
