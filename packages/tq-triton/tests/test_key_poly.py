"""3-bit keys (and tq_k4v3's 3-bit values) decoded by ``key_poly``'s fp16 polynomial: its
constants against the codebook under every evaluation order (fp16 operations rounded one by
one as torch rounds them, and multiply-adds fused, from float64), the kernel's decode
against the codebook gathered by code, the query's column order against the keys' and the
accumulator's way back. The plan's choice and attention through it against tq_core:
test_key_lut.py's rows of 3-bit keys and of tq_k4v3, which the plan sends here."""

from __future__ import annotations

import itertools
import os

import pytest
import torch
import triton
import triton.language as tl

import tq_core
from tq_triton.device_tensors import codebook
from tq_triton.key_poly import (
    PAIR_OFFSET,
    PAIR_SCALE,
    POLY_OFFSET,
    POLY_SCALE,
    columns_in_head_order,
    key_columns,
    poly_coefficients,
    poly_keys,
    query_in_key_order,
)

# the 3-bit codebooks the plan decodes by the polynomial: keys of vLLM's 3-bit formats, and
# tq_k4v3's values
POLY_CODEBOOKS = ["turboquant_k3v4_nc", "turboquant_3bit_nc", "tq_k4v3 values"]
HEAD_DIMS = [64, 128, 256]


def _codebook(name: str, head_dim: int) -> torch.Tensor:
    """The fp16 centroids of one of :data:`POLY_CODEBOOKS`."""
    if name.endswith(" values"):
        return tq_core.value_codebook(tq_core.get_preset(name.split()[0]), head_dim, "cpu")[0].half()
    return codebook(tq_core.get_preset(name), head_dim, torch.device("cpu"))[2]


def _kernel_device() -> str:
    if os.environ.get("TRITON_INTERPRET") == "1":
        return "cpu"
    if not torch.cuda.is_available():
        pytest.skip("needs the Triton interpreter or a GPU")
    return "cuda"


def _horner(coef: torch.Tensor, code: torch.Tensor, fused: tuple[bool, bool, bool]) -> torch.Tensor:
    """The kernel's arithmetic for codes ``code``: fp16 operations rounded one by one (torch's
    fp16 arithmetic), or a multiply-add computed in float64 and rounded once (``fused``)."""
    s, b = POLY_SCALE.value, POLY_OFFSET.value
    a1, a3, a5, a7 = coef.tolist()

    def fma(x: torch.Tensor, y: torch.Tensor | float, z: float, fuse: bool) -> torch.Tensor:
        if fuse:
            return (x.double() * (y.double() if isinstance(y, torch.Tensor) else y) + z).half()
        return x * y + torch.tensor(z, dtype=torch.float16)

    # the kernel's t: one multiply-add on the fp16 number 1024 + 2 code, exact either way
    # (test_the_variable_is_exact_from_the_code_pairs)
    t = fma((1024 + 2 * code).half(), torch.tensor(PAIR_SCALE.value, dtype=torch.float16), PAIR_OFFSET.value, True)
    assert torch.equal(t, (code * s + b).half())
    t2 = t * t
    u = fma(torch.full_like(t2, a7), t2, a5, fused[0])
    u = fma(u, t2, a3, fused[1])
    u = fma(u, t2, a1, fused[2])
    return u * t


@pytest.mark.parametrize("fused", [False, True])
def test_the_variable_is_exact_from_the_code_pairs(fused):
    """The kernel forms ``t = POLY_SCALE * code + POLY_OFFSET`` in one multiply-add from the
    fp16 number ``1024 + 2 code`` (``_codes_pair``): exact whether the multiply-add is fused
    or rounded twice, so the polynomial's search (made on ``t``) holds."""
    code = torch.arange(8)
    h = (1024 + 2 * code).half()
    assert torch.equal(h.float(), (1024 + 2 * code).float())
    scale = torch.tensor(PAIR_SCALE.value, dtype=torch.float16)
    offset = torch.tensor(PAIR_OFFSET.value, dtype=torch.float16)
    assert float(offset) == PAIR_OFFSET.value
    if fused:
        t = (h.double() * PAIR_SCALE.value + PAIR_OFFSET.value).half()
    else:
        t = h * scale + offset
    want = code.double() * POLY_SCALE.value + POLY_OFFSET.value
    assert torch.equal(t.double(), want)


@pytest.mark.parametrize("name", POLY_CODEBOOKS)
@pytest.mark.parametrize("head_dim", [*HEAD_DIMS, 512])
def test_the_polynomial_gives_every_centroid_bit_for_bit(name, head_dim):
    cent = _codebook(name, head_dim)
    coef = poly_coefficients(cent)
    assert coef is not None and coef.dtype == torch.float16
    # every coefficient a normal fp16 number (no device may flush it); the variable's scale
    # and offset are the kernel's literals, exact in fp16
    assert coef.shape == (4,) and bool((coef.abs() >= 2.0**-14).all())
    assert POLY_SCALE.value == 0.25 and POLY_OFFSET.value == -3.5 * 0.25
    code = torch.arange(8)
    for fused in itertools.product((False, True), repeat=3):
        got = _horner(coef, code, fused)
        assert torch.equal(got.view(torch.int16), cent.view(torch.int16)), fused
    # and the whole in float32, rounded once
    c = code.float()
    t = c * POLY_SCALE.value + POLY_OFFSET.value
    a1, a3, a5, a7 = (float(x) for x in coef)
    got = (t * (((a7 * t * t + a5) * t * t + a3) * t * t + a1)).half()
    assert torch.equal(got.view(torch.int16), cent.view(torch.int16))


def test_codebooks_without_the_symmetry_have_no_polynomial():
    cent = codebook(tq_core.get_preset("turboquant_k3v4_nc"), 128, torch.device("cpu"))[2]
    lopsided = cent.clone()
    lopsided[7] = lopsided[7] * 1.5
    assert poly_coefficients(lopsided) is None
    with pytest.raises(ValueError, match="8 fp16 centroids"):
        poly_coefficients(cent.float())
    with pytest.raises(ValueError, match="8 fp16 centroids"):
        poly_coefficients(torch.cat([cent, cent]))


def test_key_columns_is_a_permutation_within_each_chunk():
    d = torch.arange(256)
    cols = key_columns(d)
    assert sorted(cols.tolist()) == d.tolist()
    assert torch.equal(cols // 32, d // 32)
    # column 8 G + 2 k + h of a chunk holds position 4 G + k + 16 h
    assert cols[:8].tolist() == [0, 16, 1, 17, 2, 18, 3, 19]
    assert cols[8:10].tolist() == [4, 20]


@triton.jit
def _poly_tile(W, Coef, Out, Sq, T: tl.constexpr, D: tl.constexpr):
    t = tl.arange(0, T)[:, None]
    row = W + t * (3 * D // 32) + tl.arange(0, D // 32)[None, :] * 3
    w0 = tl.load(row).to(tl.uint32, bitcast=True)
    w1 = tl.load(row + 1).to(tl.uint32, bitcast=True)
    w2 = tl.load(row + 2).to(tl.uint32, bitcast=True)
    k16, sq = poly_keys(w0, w1, w2, Coef, T, D)
    tl.store(Out + t * D + tl.arange(0, D)[None, :], k16)
    tl.store(Sq + tl.arange(0, T), sq)


@triton.jit
def _reorder(Q, Out, M: tl.constexpr, D: tl.constexpr, BACK: tl.constexpr):
    m = tl.arange(0, M)[:, None]
    d = tl.arange(0, D)[None, :]
    q = tl.load(Q + m * D + d)
    if BACK:
        tl.store(Out + m * D + d, columns_in_head_order(q, M, D))
    else:
        tl.store(Out + m * D + d, query_in_key_order(q, M, D))


def _words(codes: torch.Tensor) -> torch.Tensor:
    """3-bit codes ``[T, D]`` packed as the cache packs them: each token's bit stream, 32-bit words."""
    stream = [sum(int(c) << (3 * j) for j, c in enumerate(row)) for row in codes.tolist()]
    nw = codes.shape[1] * 3 // 32
    words = [[(v >> (32 * i)) & 0xFFFFFFFF for i in range(nw)] for v in stream]
    return torch.tensor([[x - (1 << 32) if x >= 1 << 31 else x for x in row] for row in words], dtype=torch.int32)


@pytest.mark.parametrize(
    ("name", "head_dim"), [("turboquant_k3v4_nc", d) for d in HEAD_DIMS] + [("tq_k4v3 values", 128)]
)
def test_the_kernel_decodes_the_gathered_centroids(name, head_dim, gen):
    dev = _kernel_device()
    cent = _codebook(name, head_dim)
    T, D = 16, head_dim
    # every code at least once per token, in shuffled positions
    codes = torch.stack([torch.randperm(D, generator=gen) % 8 for _ in range(T)])
    out = torch.zeros(T, D, dtype=torch.float16, device=dev)
    sq = torch.zeros(T, dtype=torch.float32, device=dev)
    _poly_tile[(1,)](_words(codes).to(dev), poly_coefficients(cent).to(dev), out, sq, T, D)
    want = cent[codes][:, key_columns(torch.arange(D))]
    assert torch.equal(out.cpu().view(torch.int16), want.view(torch.int16))
    torch.testing.assert_close(sq.cpu(), want.float().pow(2).sum(1), rtol=1e-6, atol=0)


@pytest.mark.parametrize("head_dim", HEAD_DIMS)
def test_the_query_takes_the_keys_column_order(head_dim, gen):
    dev = _kernel_device()
    M, D = 16, head_dim
    q = torch.randn(M, D, generator=gen).half()
    out = torch.empty_like(q, device=dev)
    _reorder[(1,)](q.to(dev), out, M, D, False)
    assert torch.equal(out.cpu(), q[:, key_columns(torch.arange(D))])


@pytest.mark.parametrize("head_dim", HEAD_DIMS)
def test_the_accumulator_goes_back_to_head_dim_order(head_dim, gen):
    # a value product of tiles in key_columns' order: column c holds head_dim index
    # key_columns(c); columns_in_head_order puts index i in column i
    dev = _kernel_device()
    M, D = 16, head_dim
    acc = torch.randn(M, D, generator=gen)
    out = torch.empty_like(acc, device=dev)
    _reorder[(1,)](acc.to(dev), out, M, D, True)
    want = torch.empty_like(acc)
    want[:, key_columns(torch.arange(D))] = acc
    assert torch.equal(out.cpu(), want)
