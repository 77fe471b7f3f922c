"""The inline PTX of the Gluon kernel's register-table lookups (``gluon_kernel``): 3- and
4-bit codebook keys, and the calibrated formats' 3- and 4-bit values, in the tables of
``key_lut.lut_words``. The portable kernel looks the same tables up in plain Triton
operations (``key_lut``); a host model of ``prmt`` checks these texts
(``tests/test_key_lut.py``).

A byte permute (PTX ``prmt``) picks 4 of the 8 bytes of a word pair by 4 selector nibbles,
so four codes spread to nibbles give four centroids' low bytes in one instruction, their
high bytes in a second, and two more permutes interleave them into two fp16 pairs: about
one instruction per key element, where gathering each centroid from memory costs a load
and a 64-bit address. A symmetric 16-entry codebook's table holds its 8 magnitudes: a
code's low 3 bits (flipped for the negative half) select its magnitude, and its bit 3 its
sign, which two more permutes spread over the fp16 sign bits (:func:`_lut16_ptx`).
"""

from __future__ import annotations

import triton.language as tl


def _lut_ptx(sel: int, lo: int, hi: int, out: str, sq: int, regs: str = "") -> str:
    """The PTX of one lookup, its operands numbered by the caller: ``$sel`` selectors,
    ``$lo``/``$lo+1`` low-byte words, ``$hi``/``$hi+1`` high-byte words; ``out``: where the
    centroid pairs ``a`` (centroids 0, 1) and ``b`` (2, 3) go; ``$sq``: the float32 sum of
    the four squares, ``(c0^2 + c2^2) + (c1^2 + c3^2)`` as ``key_lut``'s lookup sums them in
    the portable kernel (each square of an fp16 number is exact in float32, so both kernels
    get the same sum bit for bit); ``regs``: more 32-bit registers that ``out`` uses."""
    return f"""{{
.reg .b32 l, h, a, b{regs};
.reg .b16 a0, a1, b0, b1;
.reg .f32 f0, f1, f2, f3;
prmt.b32 l, ${lo}, ${lo + 1}, ${sel};
prmt.b32 h, ${hi}, ${hi + 1}, ${sel};
prmt.b32 a, l, h, 0x5140;
prmt.b32 b, l, h, 0x7362;
{out}
mov.b32 {{a0, a1}}, a;
mov.b32 {{b0, b1}}, b;
cvt.f32.f16 f0, a0;
cvt.f32.f16 f1, a1;
cvt.f32.f16 f2, b0;
cvt.f32.f16 f3, b1;
mul.rn.f32 f0, f0, f0;
fma.rn.f32 f0, f2, f2, f0;
mul.rn.f32 f1, f1, f1;
fma.rn.f32 f1, f3, f3, f1;
add.rn.f32 ${sq}, f0, f1;
}}"""


# the byte permutes that give each centroid of a 4-code group its sign (see _lut16_ptx)
SIGN_SELECTORS = (0x80C0, 0x90D0)


def _lut16_ptx(n_out: int, out: str) -> str:
    """One lookup in a symmetric 16-entry codebook. Its ``n_out`` outputs come first: the
    four signed centroids, as ``out`` writes the fp16 pairs ``a`` (centroids 0, 1) and ``b``
    (2, 3), then the float32 sum of their squares (``$n_out-1``); its inputs follow:
    ``$n_out`` the magnitude selectors (4 nibbles, 0..7), ``$n_out+1`` the group's raw 4-bit
    codes, ``$n_out+2``/``+3`` the low-byte words, ``$n_out+4``/``+5`` the high-byte words.
    Only bits 0-15 of the selectors and of the codes are read. A code's bit 3 is its sign
    (set: positive): the permutes of ``SIGN_SELECTORS``, in sign-replicating mode (selector
    bit 3), spread the bit 3 of codes 0 and 1 (then 2 and 3) over the bytes that hold their
    fp16 sign bits: code 1's and 3's bit 3 are the top bits of the codes' bytes 0 and 1,
    code 0's and 2's those of the codes shifted left by 4."""
    sel_a, sel_b = SIGN_SELECTORS
    raw = n_out + 1
    sign = f"""shl.b32 r4, ${raw}, 4;
prmt.b32 m, ${raw}, r4, {sel_a:#x};
not.b32 m, m;
and.b32 m, m, 0x80008000;
xor.b32 a, a, m;
prmt.b32 m, ${raw}, r4, {sel_b:#x};
not.b32 m, m;
and.b32 m, m, 0x80008000;
xor.b32 b, b, m;
{out}"""
    return _lut_ptx(n_out, n_out + 2, n_out + 4, sign, n_out - 1, regs=", r4, m")


# one lookup: the centroids as two fp16 pairs in 32-bit registers ($0: 0 and 1, $1: 2 and
# 3), their squares' sum ($2); $3 the selectors, $4/$5 low-byte words, $6/$7 high-byte words
LUT_PAIRS_PTX = tl.constexpr(_lut_ptx(3, 4, 6, "mov.b32 $0, a;\nmov.b32 $1, b;", 2))
# the same in a symmetric 16-entry table: $3 magnitude selectors, $4 the raw 4-bit codes
# (_lut16_ptx), $5/$6 low-byte words, $7/$8 high-byte words
LUT16_PAIRS_PTX = tl.constexpr(_lut16_ptx(3, "mov.b32 $0, a;\nmov.b32 $1, b;"))
