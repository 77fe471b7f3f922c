"""The inline PTX of the token-rows kernel (``token_rows_kernel``): whole matrix-unit steps
written per thread, so that decoded keys and values go from the code words to the
``mma.sync`` operand registers with no shared-memory round trip.

The kernel computes the scores transposed, ``S^T = K Q^T``: the tile's tokens are the rows
of the ``m16n8k16`` product (16 per step) and its queries the 8 columns, so a decode step
of one query token with 4 q heads per kv head pads 4 columns of 8, where ``Q K^T`` pads 12
rows of 16. A thread of the warp is lane ``4 g + c`` (``g`` 0..7, ``c`` 0..3); the
fragments of the product (PTX ISA, "Matrix Fragments for mma.m16n8k16") then hold:

- ``A`` (16 x 16, four 32-bit registers): rows ``g`` and ``g + 8``, columns ``2 c, 2 c + 1``
  (registers 0 and 1) and ``2 c + 8, 2 c + 9`` (registers 2 and 3);
- ``B`` (16 x 8, two registers): rows ``2 c, 2 c + 1`` and ``2 c + 8, 2 c + 9``, column ``g``;
- ``C`` (16 x 8, four float32): rows ``g`` (0, 1) and ``g + 8`` (2, 3), columns ``2 c, 2 c + 1``.

A product's inner index may be any permutation of head_dim as long as both operands use
the same one: in step ``s`` thread ``c`` holds head_dim positions ``32 c + 4 s .. + 3`` of
its key rows (two fp16 pairs) and of its query column, so one thread decodes exactly the 32
codes of one key chunk (3-bit: three words; fp8: eight) per key row, all it multiplies.

The value product is transposed too, ``O^T += V^T P^T``: its rows are head_dim positions,
its inner index the 16 tokens. Thread ``(g, c)`` decodes value words ``2 g`` and ``2 g + 1``
(head_dim ``16 g .. 16 g + 15``) of tokens ``2 c, 2 c + 1, 2 c + 8, 2 c + 9``; row ``g`` of
row tile ``u`` is head_dim ``16 g + 2 u`` (a byte's low nibble) and row ``g + 8`` is
``16 g + 2 u + 1`` (its high nibble). The probabilities reach the ``B`` operand from the score
product's ``C`` layout by one ``movmatrix`` transpose per 8 x 8 quarter.
"""

from __future__ import annotations

MMA = "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"

# fp16 constants: 1032 (1024 + the 4-bit code's centre 8), 1/16, -72 (64 + 8)
_V_BIAS = 0x64086408
_V_SIXTEENTH = 0x2C002C00
_V_HI_BIAS = 0xD480D480


def _group_bits(group: int, words: tuple[str, str, str]) -> str:
    """PTX that leaves the 12 stream bits of 3-bit codes ``4 group .. + 3`` in the low bits
    of ``x`` (the chunk's words ``w0, w1, w2``; ``key_lut.selectors_fn``' shifts)."""
    w0, w1, w2 = words
    return {
        0: f"mov.b32 x, {w0};",
        1: f"shr.b32 x, {w0}, 12;",
        2: f"shf.r.wrap.b32 x, {w0}, {w1}, 24;",
        3: f"shr.b32 x, {w1}, 4;",
        4: f"shr.b32 x, {w1}, 16;",
        5: f"shf.r.wrap.b32 x, {w1}, {w2}, 28;",
        6: f"shr.b32 x, {w2}, 8;",
        7: f"shr.b32 x, {w2}, 20;",
    }[group]


def _squares(a: str, b: str, sq: str) -> str:
    """The squares of the four fp16 centroids in pairs ``a``, ``b`` added to float32 ``sq``:
    two terms per fp16 half, each half then converted, as ``key_lut``'s lookup sums them."""
    return f"""mul.rn.f16x2 q, {a}, {a};
fma.rn.f16x2 q, {b}, {b}, q;
mov.b32 {{q0, q1}}, q;
cvt.f32.f16 f0, q0;
cvt.f32.f16 f1, q1;
add.f32 f0, f0, f1;
add.f32 {sq}, {sq}, f0;"""


def _lookup3(group: int, words: tuple[str, str, str], a: str, b: str, sq: str) -> str:
    """The four centroids of group ``group`` as fp16 pairs ``a`` (codes 0, 1) and ``b`` (2, 3),
    and their squares added to ``sq`` (float32; two terms per fp16 half, as ``key_lut``'s
    lookup sums them). The selector nibbles as ``key_lut.selectors_fn`` makes them; the two
    ``lop3`` leave other bits behind, which the last ``and`` clears (a selector nibble's bit
    3 would switch ``prmt`` to sign replication)."""
    return f"""{_group_bits(group, words)}
shl.b32 y, x, 2;
lop3.b32 t, x, y, 0x3F, 0xE4;
shl.b32 y, t, 1;
lop3.b32 t, t, y, 0x0707, 0xE4;
and.b32 t, t, 0x7777;
prmt.b32 l, $LA, $LB, t;
prmt.b32 h, $HA, $HB, t;
prmt.b32 {a}, l, h, 0x5140;
prmt.b32 {b}, l, h, 0x7362;
{_squares(a, b, sq)}"""


def _numbered(text: str, names: dict[str, int]) -> str:
    for name, i in sorted(names.items(), key=lambda kv: -len(kv[0])):
        text = text.replace(f"${name}", f"${i}")
    return text


def _qk_block(body: list[str], regs: str, c_in: int) -> str:
    """A codebook-key score block: its registers, the ``C`` fragment read from ``$c_in ..
    $c_in + 3`` and the two sums of squares from the next two operands, ``body``, then
    ``$0..$3`` the fragment and ``$4``, ``$5`` the sums."""
    return "\n".join(
        [
            "{",
            regs,
            ".reg .b16 q0, q1;",
            ".reg .f32 f0, f1, sg, sk, c0, c1, c2, c3;",
            *(f"mov.f32 c{i}, ${c_in + i};" for i in range(4)),
            f"mov.f32 sg, ${c_in + 4};",
            f"mov.f32 sk, ${c_in + 5};",
            *body,
            *(f"mov.f32 ${i}, c{i};" for i in range(4)),
            "mov.f32 $4, sg;",
            "mov.f32 $5, sk;",
            "}",
        ]
    )


def qk3_ptx(half: int) -> str:
    """Four steps (``4 half .. 4 half + 3``) of ``S^T`` for 3-bit codebook keys. Outputs:
    ``$0..$3`` the ``C`` fragment, ``$4``, ``$5`` the sums of squared centroids of key rows
    ``g`` and ``g + 8`` so far. Inputs: ``$6..$8`` the chunk words of row ``g``, ``$9..$11``
    of row ``g + 8``, ``$12..$15`` the register table (``key_lut.lut_words``), ``$16..$23``
    the query's ``B`` registers of the four steps, ``$24..$27`` the ``C`` fragment so far,
    ``$28``, ``$29`` the sums so far."""
    body = []
    for s in range(4 * half, 4 * half + 4):
        body.append(_lookup3(s, ("$6", "$7", "$8"), "ag", "bg", "sg"))
        body.append(_lookup3(s, ("$9", "$10", "$11"), "ak", "bk", "sk"))
        qb = 16 + 2 * (s - 4 * half)
        body.append(f"{MMA} {{c0, c1, c2, c3}}, {{ag, ak, bg, bk}}, {{${qb}, ${qb + 1}}}, {{c0, c1, c2, c3}};")
    text = _qk_block(body, ".reg .b32 x, y, t, l, h, q, ag, bg, ak, bk;", 24)
    return _numbered(text, {"LA": 12, "LB": 13, "HA": 14, "HB": 15})


QK3_CONSTRAINTS = "=f,=f,=f,=f,=f,=f," + ",".join(["r"] * 18) + ",f,f,f,f,f,f"


def _lookup4(word: str, msel: str, high: bool, a: str, b: str, sq: str) -> str:
    """The four signed centroids of 4-bit codes 0-3 (``high``: 4-7) of ``word`` as fp16 pairs
    ``a``, ``b`` and their squares added to ``sq``: ``key_lut.lut16_values``' lookup of the
    symmetric codebook's magnitudes by the magnitude selectors ``msel``, the sign from each
    code's bit 3 (``key_lut.SIGN_SELECTORS``)."""
    sel_a, sel_b = 0x80C0, 0x90D0
    if high:
        shift = (f"shr.b32 t, {msel}, 16;", f"shr.b32 x, {word}, 16;")
    else:
        shift = (f"mov.b32 t, {msel};", f"mov.b32 x, {word};")
    return f"""{shift[0]}
{shift[1]}
prmt.b32 l, $LA, $LB, t;
prmt.b32 h, $HA, $HB, t;
prmt.b32 {a}, l, h, 0x5140;
prmt.b32 {b}, l, h, 0x7362;
shl.b32 y, x, 4;
prmt.b32 t, x, y, {sel_a:#x};
not.b32 t, t;
and.b32 t, t, 0x80008000;
xor.b32 {a}, {a}, t;
prmt.b32 t, x, y, {sel_b:#x};
not.b32 t, t;
and.b32 t, t, 0x80008000;
xor.b32 {b}, {b}, t;
{_squares(a, b, sq)}"""


def _magnitudes(word: str, out: str) -> str:
    """``key_lut.magnitude_selectors_fn`` of ``word`` into ``out``."""
    return f"""shr.b32 t, {word}, 3;
and.b32 t, t, 0x11111111;
xor.b32 t, t, 0x11111111;
mul.lo.u32 t, t, 7;
xor.b32 t, {word}, t;
and.b32 {out}, t, 0x77777777;"""


def qk4_ptx() -> str:
    """Four steps of ``S^T`` for 4-bit codebook keys of a symmetric codebook: two words (8
    codes each) per key row, step ``2 w + h`` on word ``w``'s codes ``4 h .. 4 h + 3``.
    Outputs as :func:`qk3_ptx`'s. Inputs: ``$6``, ``$7`` the words of row ``g``, ``$8``, ``$9``
    of row ``g + 8``, ``$10..$13`` the register table of the magnitudes, ``$14..$21`` the
    query's ``B`` registers of the four steps, ``$22..$25`` the ``C`` fragment so far, ``$26``,
    ``$27`` the sums so far."""
    body = []
    for w in range(2):
        body.append(_magnitudes(f"${6 + w}", "mg"))
        body.append(_magnitudes(f"${8 + w}", "mk"))
        for hh in range(2):
            body.append(_lookup4(f"${6 + w}", "mg", bool(hh), "ag", "bg", "sg"))
            body.append(_lookup4(f"${8 + w}", "mk", bool(hh), "ak", "bk", "sk"))
            qb = 14 + 2 * (2 * w + hh)
            body.append(f"{MMA} {{c0, c1, c2, c3}}, {{ag, ak, bg, bk}}, {{${qb}, ${qb + 1}}}, {{c0, c1, c2, c3}};")
    text = _qk_block(body, ".reg .b32 x, y, t, l, h, q, ag, bg, ak, bk, mg, mk;", 22)
    return _numbered(text, {"LA": 10, "LB": 11, "HA": 12, "HB": 13})


QK4_CONSTRAINTS = "=f,=f,=f,=f,=f,=f," + ",".join(["r"] * 16) + ",f,f,f,f,f,f"


def qk8_ptx() -> str:
    """Four steps of ``S^T`` for fp8 (e4m3) keys: each word holds 4 head_dim positions,
    converted as two fp16 pairs. Outputs ``$0..$3`` the ``C`` fragment. Inputs: ``$4..$7``
    four words of key row ``g``, ``$8..$11`` of row ``g + 8``, ``$12..$19`` the query's
    ``B`` registers of the four steps, ``$20..$23`` the ``C`` fragment so far."""
    body = []
    for k in range(4):
        body += [
            f"mov.b32 {{lo, hi}}, ${4 + k};",
            "cvt.rn.f16x2.e4m3x2 ag, lo;",
            "cvt.rn.f16x2.e4m3x2 bg, hi;",
            f"mov.b32 {{lo, hi}}, ${8 + k};",
            "cvt.rn.f16x2.e4m3x2 ak, lo;",
            "cvt.rn.f16x2.e4m3x2 bk, hi;",
            f"{MMA} {{c0, c1, c2, c3}}, {{ag, ak, bg, bk}}, {{${12 + 2 * k}, ${13 + 2 * k}}}, {{c0, c1, c2, c3}};",
        ]
    return "\n".join(
        [
            "{",
            ".reg .b32 ag, bg, ak, bk;",
            ".reg .b16 lo, hi;",
            ".reg .f32 c0, c1, c2, c3;",
            "mov.f32 c0, $20;",
            "mov.f32 c1, $21;",
            "mov.f32 c2, $22;",
            "mov.f32 c3, $23;",
            *body,
            "mov.f32 $0, c0;",
            "mov.f32 $1, c1;",
            "mov.f32 $2, c2;",
            "mov.f32 $3, c3;",
            "}",
        ]
    )


QK8_CONSTRAINTS = "=f,=f,=f,=f," + ",".join(["r"] * 16) + ",f,f,f,f"


def pv4_ptx() -> str:
    """One 16-token step of ``O^T`` for 4-bit values, one row tile. Outputs ``$0..$3`` the
    ``C`` fragment. Inputs: ``$4``, ``$5`` the value word of tokens ``2 c`` and ``2 c + 1``
    that holds this row tile's positions, ``$6``, ``$7`` those of tokens ``2 c + 8``,
    ``2 c + 9``, ``$8`` the byte selector (the row tile's byte of the word in bytes 0 and 2
    of the permute), ``$9``, ``$10`` the probabilities' ``B`` registers, ``$11..$14`` the
    ``C`` fragment so far. A low nibble becomes the fp16 ``1024 + code`` (``lop3`` with
    ``0x6400``) minus 1032; a high nibble ``1024 + 16 code``, times 1/16 minus 72 in one
    ``fma``: both are ``code - 8``, exact."""
    return f"""{{
.reg .b32 x, a0, a1, a2, a3, k0, k1, k2;
mov.b32 k0, {_V_BIAS:#x};
mov.b32 k1, {_V_SIXTEENTH:#x};
mov.b32 k2, {_V_HI_BIAS:#x};
prmt.b32 x, $4, $5, $8;
lop3.b32 a0, x, 0x000F000F, 0x64006400, 0xEA;
sub.rn.f16x2 a0, a0, k0;
lop3.b32 a1, x, 0x00F000F0, 0x64006400, 0xEA;
fma.rn.f16x2 a1, a1, k1, k2;
prmt.b32 x, $6, $7, $8;
lop3.b32 a2, x, 0x000F000F, 0x64006400, 0xEA;
sub.rn.f16x2 a2, a2, k0;
lop3.b32 a3, x, 0x00F000F0, 0x64006400, 0xEA;
fma.rn.f16x2 a3, a3, k1, k2;
{MMA} {{$0, $1, $2, $3}}, {{a0, a1, a2, a3}}, {{$9, $10}}, {{$11, $12, $13, $14}};
}}"""


PV4_CONSTRAINTS = "=f,=f,=f,=f," + ",".join(["r"] * 7) + ",f,f,f,f"

# two float32 (columns 2 c and 2 c + 1 of an 8 x 8 quarter of C) to an fp16 pair, then the
# quarter transposed: the thread then holds rows 2 c, 2 c + 1 of column g, a B register
PAIR_TRANSPOSED_PTX = "{ .reg .b32 x; cvt.rn.f16x2.f32 x, $2, $1; movmatrix.sync.aligned.m8n8.trans.b16 $0, x; }"
PAIR_TRANSPOSED_CONSTRAINTS = "=r,f,f"
