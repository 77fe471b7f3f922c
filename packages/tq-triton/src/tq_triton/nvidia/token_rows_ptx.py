"""The inline PTX of the token-rows kernel (``token_rows_kernel``): whole matrix-unit steps
written per thread, so that decoded keys and values go from the code words to the
``mma.sync`` operand registers with no shared-memory round trip. (Also the Gluon kernel's
decode of symmetric values, :data:`SYMMETRIC_PAIRS_PTX`, which shares their constants.)

The kernel computes the scores transposed, ``S^T = K Q^T``: the tile's tokens are the rows
of the ``m16n8k16`` product (16 per step) and its queries the 8 columns, so a decode step
of one query token with 4 q heads per kv head pads 4 columns of 8, where ``Q K^T`` pads 12
rows of 16. A block may multiply the same decoded ``A`` registers into ``nct`` column tiles
of 8 queries each (``nct`` 1 or 2), one ``mma.sync`` per tile. A thread of the warp is lane
``4 g + c`` (``g`` 0..7, ``c`` 0..3); the fragments of the product (PTX ISA, "Matrix
Fragments for mma.m16n8k16") then hold:

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

from .lut_ptx import SIGN_SELECTORS

MMA = "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"

# fp16 constants: 1032 (1024 + the 4-bit code's centre 8), 1/16, -72 (64 + 8), and -71.5
# (64 + 7.5) for symmetric values
_V_BIAS = 0x64086408
_V_SIXTEENTH = 0x2C002C00
_V_HI_BIAS = 0xD480D480
_V_SYM_BIAS = 0xD478D478


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


def _lookup3(group: int, words: tuple[str, str, str], a: str, b: str) -> str:
    """The four centroids of group ``group`` as fp16 pairs ``a`` (codes 0, 1) and ``b`` (2, 3).
    The selector nibbles as
    ``key_lut.selectors_fn`` makes them; the two ``lop3`` leave other bits behind, which the
    last ``and`` clears (a selector nibble's bit 3 would switch ``prmt`` to sign replication)."""
    return f"""{_group_bits(group, words)}
shl.b32 y, x, 2;
lop3.b32 t, x, y, 0x3F, 0xE4;
shl.b32 y, t, 1;
lop3.b32 t, t, y, 0x0707, 0xE4;
and.b32 t, t, 0x7777;
{_table_lookup(a, b)}"""


def _table_lookup(a: str, b: str) -> str:
    """The four centroids the selector nibbles in ``t`` name, from the register table, as fp16
    pairs ``a`` and ``b``."""
    return f"""prmt.b32 l, $LA, $LB, t;
prmt.b32 h, $HA, $HB, t;
prmt.b32 {a}, l, h, 0x5140;
prmt.b32 {b}, l, h, 0x7362;"""


# the matrix unit's sums of squares (``norms``): squared A registers times a B of ones, so
# that every column of the product holds each key row's sum over the step's 16 positions
_NORM_REGS = ".reg .b32 one, p0, p1, p2, p3;\n.reg .f32 n0, n1, n2, n3;"
_NORM_STEP = f"""mul.rn.f16x2 p0, ag, ag;
mul.rn.f16x2 p1, ak, ak;
mul.rn.f16x2 p2, bg, bg;
mul.rn.f16x2 p3, bk, bk;
{MMA} {{n0, n1, n2, n3}}, {{p0, p1, p2, p3}}, {{one, one}}, {{n0, n1, n2, n3}};"""


def _numbered(text: str, names: dict[str, int]) -> str:
    for name, i in sorted(names.items(), key=lambda kv: -len(kv[0])):
        text = text.replace(f"${name}", f"${i}")
    return text


def _qk_block(body: list[str], regs: str, c_in: int, nct: int, norms: bool) -> str:
    """A codebook-key score block of ``nct`` column tiles: its registers, the ``C`` fragments
    read from ``$c_in ..`` (four per column tile) and the two sums of squares from the next two
    operands, ``body``, then ``$0 ..`` the fragments and the two sums after them. With
    ``norms`` the sums live in the norm product's ``C`` registers ``n0 .. n3`` (rows ``g``:
    ``n0``, ``n1``; ``g + 8``: ``n2``, ``n3``; all columns alike); without, they pass through."""
    c = 4 * nct
    if norms:
        sums_in = [
            f"mov.f32 n0, ${c_in + c};",
            "mov.f32 n1, n0;",
            f"mov.f32 n2, ${c_in + c + 1};",
            "mov.f32 n3, n2;",
            "mov.b32 one, 0x3c003c00;",
        ]
        sums_out = [f"mov.f32 ${c}, n0;", f"mov.f32 ${c + 1}, n2;"]
        regs = f"{regs}\n{_NORM_REGS}"
    else:
        sums_in = []
        sums_out = [f"mov.f32 ${c}, ${c_in + c};", f"mov.f32 ${c + 1}, ${c_in + c + 1};"]
    return "\n".join(
        [
            "{",
            regs,
            f".reg .f32 {', '.join(f'c{i}' for i in range(c))};",
            *(f"mov.f32 c{i}, ${c_in + i};" for i in range(c)),
            *sums_in,
            *body,
            *(f"mov.f32 ${i}, c{i};" for i in range(c)),
            *sums_out,
            "}",
        ]
    )


def _mmas(a: str, b_first: int, nct: int) -> list[str]:
    """One ``m16n8k16`` step of A registers ``a`` into each of ``nct`` column tiles: tile ``k``
    multiplies ``B`` registers ``$b_first + 8 k`` and ``+ 1`` (a block's four steps take
    eight per column tile) into ``C`` registers ``c4k .. c4k+3``."""
    return [
        f"{MMA} {{c{4 * k}, c{4 * k + 1}, c{4 * k + 2}, c{4 * k + 3}}}, {{{a}}}, "
        f"{{${b_first + 8 * k}, ${b_first + 8 * k + 1}}}, {{c{4 * k}, c{4 * k + 1}, c{4 * k + 2}, c{4 * k + 3}}};"
        for k in range(nct)
    ]


def qk3_ptx(half: int, nct: int = 1, norms: bool = False) -> str:
    """Four steps (``4 half .. 4 half + 3``) of ``S^T`` for 3-bit codebook keys into ``nct``
    column tiles of 8 queries. With ``n = 4 nct`` and ``o = n + 2``: outputs ``$0..$(n-1)`` the
    ``C`` fragments (four per column tile), ``$n``, ``$(n+1)`` the sums of squared centroids of
    key rows ``g`` and ``g + 8`` so far. Inputs: ``$o..$(o+2)`` the chunk words of row ``g``,
    ``$(o+3)..$(o+5)`` of row ``g + 8``, ``$(o+6)..$(o+9)`` the register table
    (``key_lut.lut_words``), then eight ``B`` registers per column tile (the query's, of the
    four steps), the ``C`` fragments so far and the two sums so far. ``norms`` (the formats
    that correct the norm): the sums come from the matrix unit (:func:`_qk_block`) and are each
    key row's whole sum, the same in its four lanes; else the two sums pass through."""
    n = 4 * nct
    o = n + 2
    w = (f"${o}", f"${o + 1}", f"${o + 2}"), (f"${o + 3}", f"${o + 4}", f"${o + 5}")
    body = []
    for s in range(4 * half, 4 * half + 4):
        body.append(_lookup3(s, w[0], "ag", "bg"))
        body.append(_lookup3(s, w[1], "ak", "bk"))
        body += _mmas("ag, ak, bg, bk", o + 10 + 2 * (s - 4 * half), nct)
        if norms:
            body.append(_NORM_STEP)
    regs = ".reg .b32 x, y, t, l, h, ag, bg, ak, bk;"
    text = _qk_block(body, regs, o + 10 + 8 * nct, nct, norms)
    return _numbered(text, {"LA": o + 6, "LB": o + 7, "HA": o + 8, "HB": o + 9})


def qk3_constraints(nct: int = 1) -> str:
    """:func:`qk3_ptx`'s operand constraints."""
    return ",".join(["=f"] * (4 * nct + 2) + ["r"] * (10 + 8 * nct) + ["f"] * (4 * nct + 2))


QK3_CONSTRAINTS = qk3_constraints()


def _lookup4(word: str, msel: str, high: bool, a: str, b: str) -> str:
    """The four signed centroids of 4-bit codes 0-3 (``high``: 4-7) of ``word`` as fp16 pairs
    ``a``, ``b``: ``key_lut.lut16_values``' lookup of the
    symmetric codebook's magnitudes by the magnitude selectors ``msel``, the sign from each
    code's bit 3 (``lut_ptx.SIGN_SELECTORS``)."""
    sel_a, sel_b = SIGN_SELECTORS
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
xor.b32 {b}, {b}, t;"""


def _magnitudes(word: str, out: str) -> str:
    """``key_lut.magnitude_selectors_fn`` of ``word`` into ``out``."""
    return f"""shr.b32 t, {word}, 3;
and.b32 t, t, 0x11111111;
xor.b32 t, t, 0x11111111;
mul.lo.u32 t, t, 7;
xor.b32 t, {word}, t;
and.b32 {out}, t, 0x77777777;"""


def qk4_ptx(nct: int = 1, norms: bool = False) -> str:
    """Four steps of ``S^T`` for 4-bit codebook keys of a symmetric codebook into ``nct``
    column tiles: two words (8 codes each) per key row, step ``2 w + h`` on word ``w``'s codes
    ``4 h .. 4 h + 3``. Outputs as :func:`qk3_ptx`'s. Inputs, from ``o = 4 nct + 2``:
    ``$o``, ``$(o+1)`` the words of row ``g``, ``$(o+2)``, ``$(o+3)`` of row ``g + 8``,
    ``$(o+4)..$(o+7)`` the register table of the magnitudes, then eight ``B`` registers per
    column tile, the ``C`` fragments so far and the two sums so far (``norms`` as
    :func:`qk3_ptx`'s)."""
    n = 4 * nct
    o = n + 2
    body = []
    for w in range(2):
        body.append(_magnitudes(f"${o + w}", "mg"))
        body.append(_magnitudes(f"${o + 2 + w}", "mk"))
        for hh in range(2):
            body.append(_lookup4(f"${o + w}", "mg", bool(hh), "ag", "bg"))
            body.append(_lookup4(f"${o + 2 + w}", "mk", bool(hh), "ak", "bk"))
            body += _mmas("ag, ak, bg, bk", o + 8 + 2 * (2 * w + hh), nct)
            if norms:
                body.append(_NORM_STEP)
    regs = ".reg .b32 x, y, t, l, h, ag, bg, ak, bk, mg, mk;"
    text = _qk_block(body, regs, o + 8 + 8 * nct, nct, norms)
    return _numbered(text, {"LA": o + 4, "LB": o + 5, "HA": o + 6, "HB": o + 7})


def qk4_constraints(nct: int = 1) -> str:
    """:func:`qk4_ptx`'s operand constraints."""
    return ",".join(["=f"] * (4 * nct + 2) + ["r"] * (8 + 8 * nct) + ["f"] * (4 * nct + 2))


QK4_CONSTRAINTS = qk4_constraints()


def qk8_ptx(nct: int = 1) -> str:
    """Four steps of ``S^T`` for fp8 (e4m3) keys into ``nct`` column tiles: each word holds 4
    head_dim positions, converted as two fp16 pairs. With ``n = 4 nct``: outputs ``$0..$(n-1)``
    the ``C`` fragments. Inputs: ``$n..$(n+3)`` four words of key row ``g``, ``$(n+4)..$(n+7)``
    of row ``g + 8``, then eight ``B`` registers per column tile (the query's, of the four
    steps) and the ``C`` fragments so far."""
    n = 4 * nct
    body = []
    for k in range(4):
        body += [
            f"mov.b32 {{lo, hi}}, ${n + k};",
            "cvt.rn.f16x2.e4m3x2 ag, lo;",
            "cvt.rn.f16x2.e4m3x2 bg, hi;",
            f"mov.b32 {{lo, hi}}, ${n + 4 + k};",
            "cvt.rn.f16x2.e4m3x2 ak, lo;",
            "cvt.rn.f16x2.e4m3x2 bk, hi;",
            *_mmas("ag, ak, bg, bk", n + 8 + 2 * k, nct),
        ]
    c_in = n + 8 + 8 * nct
    return "\n".join(
        [
            "{",
            ".reg .b32 ag, bg, ak, bk;",
            ".reg .b16 lo, hi;",
            f".reg .f32 {', '.join(f'c{i}' for i in range(n))};",
            *(f"mov.f32 c{i}, ${c_in + i};" for i in range(n)),
            *body,
            *(f"mov.f32 ${i}, c{i};" for i in range(n)),
            "}",
        ]
    )


def qk8_constraints(nct: int = 1) -> str:
    """:func:`qk8_ptx`'s operand constraints."""
    return ",".join(["=f"] * (4 * nct) + ["r"] * (8 + 8 * nct) + ["f"] * (4 * nct))


QK8_CONSTRAINTS = qk8_constraints()


def pv4_ptx(nct: int = 1, symmetric: bool = False) -> str:
    """One 16-token step of ``O^T`` for 4-bit values, one row tile, into ``nct`` column tiles.
    With ``n = 4 nct``: outputs ``$0..$(n-1)`` the ``C`` fragments (four per column tile).
    Inputs: ``$n``, ``$(n+1)`` the value word of tokens ``2 c`` and ``2 c + 1`` that holds this
    row tile's positions, ``$(n+2)``, ``$(n+3)`` those of tokens ``2 c + 8``, ``2 c + 9``,
    ``$(n+4)`` the byte selector (the row tile's byte of the word in bytes 0 and 2 of the
    permute), then the probabilities' two ``B`` registers per column tile and the ``C``
    fragments so far. A low nibble becomes the fp16 ``1024 + code`` (``lop3`` with ``0x6400``)
    minus 1032; a high nibble ``1024 + 16 code``, times 1/16 minus 72 in one ``fma``: both are
    ``code - 8``, exact. ``symmetric`` (tq_k4v4's values):
    both nibbles ``code - 7.5``, exact, the low one shifted into the high nibble's place
    first (1031.5 is no fp16 number), one more instruction per fp16 pair of low nibbles."""
    n = 4 * nct
    b = n + 5
    c_in = b + 2 * nct
    mmas = [
        f"{MMA} {{${4 * k}, ${4 * k + 1}, ${4 * k + 2}, ${4 * k + 3}}}, {{a0, a1, a2, a3}}, "
        f"{{${b + 2 * k}, ${b + 2 * k + 1}}}, {{${c_in + 4 * k}, ${c_in + 4 * k + 1}, ${c_in + 4 * k + 2}, "
        f"${c_in + 4 * k + 3}}};"
        for k in range(nct)
    ]

    def low(out: str) -> list[str]:
        if symmetric:
            return [
                "shl.b32 y, x, 4;",
                f"lop3.b32 {out}, y, 0x00F000F0, 0x64006400, 0xEA;",
                f"fma.rn.f16x2 {out}, {out}, k1, k2;",
            ]
        return [f"lop3.b32 {out}, x, 0x000F000F, 0x64006400, 0xEA;", f"sub.rn.f16x2 {out}, {out}, k0;"]

    return "\n".join(
        [
            "{",
            ".reg .b32 x, y, a0, a1, a2, a3, k1, k2;" if symmetric else ".reg .b32 x, a0, a1, a2, a3, k0, k1, k2;",
            *([] if symmetric else [f"mov.b32 k0, {_V_BIAS:#x};"]),
            f"mov.b32 k1, {_V_SIXTEENTH:#x};",
            f"mov.b32 k2, {_V_SYM_BIAS if symmetric else _V_HI_BIAS:#x};",
            f"prmt.b32 x, ${n}, ${n + 1}, ${n + 4};",
            *low("a0"),
            "lop3.b32 a1, x, 0x00F000F0, 0x64006400, 0xEA;",
            "fma.rn.f16x2 a1, a1, k1, k2;",
            f"prmt.b32 x, ${n + 2}, ${n + 3}, ${n + 4};",
            *low("a2"),
            "lop3.b32 a3, x, 0x00F000F0, 0x64006400, 0xEA;",
            "fma.rn.f16x2 a3, a3, k1, k2;",
            *mmas,
            "}",
        ]
    )


# tq_k4v4's symmetric values from their bits in the Gluon kernel (``INT_VALUES``), in
# head_dim order (the order of the value table's lookups, which the calibrated formats'
# output rotation expects), one elementwise step per 4 codes: ``$2``'s bits 0-15 hold codes
# c0..c3 (low nibble first; its other bits are not read), ``$0`` becomes the fp16 pair
# (c0 - 7.5, c1 - 7.5) (c0 in the low half) and ``$1`` (c2 - 7.5, c3 - 7.5). A permute puts
# each code in bits 4-7 of its half (the even codes from the word shifted left by 4), then
# :func:`pv4_ptx`'s symmetric ``lop3`` and ``fma``.
SYMMETRIC_PAIRS_PTX = f"""{{
.reg .b32 y, t, k1, k2;
shl.b32 y, $2, 4;
mov.b32 k1, {_V_SIXTEENTH:#x};
mov.b32 k2, {_V_SYM_BIAS:#x};
prmt.b32 t, y, $2, 0x0400;
lop3.b32 t, t, 0x00F000F0, 0x64006400, 0xEA;
fma.rn.f16x2 $0, t, k1, k2;
prmt.b32 t, y, $2, 0x0501;
lop3.b32 t, t, 0x00F000F0, 0x64006400, 0xEA;
fma.rn.f16x2 $1, t, k1, k2;
}}"""


def pv4_constraints(nct: int = 1) -> str:
    """:func:`pv4_ptx`'s operand constraints."""
    return ",".join(["=f"] * (4 * nct) + ["r"] * (5 + 2 * nct) + ["f"] * (4 * nct))


PV4_CONSTRAINTS = pv4_constraints()


# fp16 constants of 3-bit values: 1028 (1024 + the code's centre 4), 1/8, -132 (128 + 4)
_V3_BIAS = 0x64046404
_V3_EIGHTH = 0x30003000
_V3_HI_BIAS = 0xD820D820


def _pair3(a: tuple[str, str], b: tuple[str, str], lo: str, hi: str) -> list[str]:
    """The fp16 pairs of two tokens' codes (``a``, ``b``: each token's 48 value bits of this
    thread as the registers ``(bits 0-31, bits 32-47)``) at the row tile's shift ``$S``: the
    even position's code ``- 4`` into ``lo``, the odd position's into ``hi`` (token ``a`` in
    the low halves)."""
    return [
        f"mov.b64 w, {{{a[0]}, {a[1]}}};",
        "shr.b64 w, w, $S;",
        "cvt.u32.u64 xa, w;",
        f"mov.b64 w, {{{b[0]}, {b[1]}}};",
        "shr.b64 w, w, $S;",
        "cvt.u32.u64 xb, w;",
        "prmt.b32 x, xa, xb, 0x5410;",
        f"lop3.b32 {lo}, x, 0x00070007, 0x64006400, 0xEA;",
        f"sub.rn.f16x2 {lo}, {lo}, k0;",
        f"lop3.b32 {hi}, x, 0x00380038, 0x64006400, 0xEA;",
        f"fma.rn.f16x2 {hi}, {hi}, k1, k2;",
    ]


def pv3_ptx(nct: int = 1) -> str:
    """One 16-token step of ``O^T`` for 3-bit values, one row tile, into ``nct`` column
    tiles. Thread ``(g, c)`` holds, per token, its 16 codes of head_dim ``16 g .. 16 g + 15``:
    48 bits (code ``e`` at bit ``3 e``) as two registers, bits 0-31 and 32-47; row tile ``u``
    takes the codes ``2 u`` (row ``g``) and ``2 u + 1`` (row ``g + 8``), bits ``6 u .. 6 u +
    5``. With ``n = 4 nct``: outputs ``$0..$(n-1)`` the ``C`` fragments. Inputs: ``$n..$(n+7)``
    the two registers of tokens ``2 c``, ``2 c + 1``, ``2 c + 8``, ``2 c + 9`` in turn,
    ``$(n+8)`` the row tile's shift ``6 u``, then the probabilities' two ``B`` registers per
    column tile and the ``C`` fragments so far. An even code becomes the fp16 ``1024 + code``
    minus 1028, an odd one ``1024 + 8 code`` times 1/8 minus 132: both ``code - 4``, exact."""
    n = 4 * nct
    b = n + 9
    c_in = b + 2 * nct
    t = [(f"${n + 2 * i}", f"${n + 2 * i + 1}") for i in range(4)]
    mmas = [
        f"{MMA} {{${4 * k}, ${4 * k + 1}, ${4 * k + 2}, ${4 * k + 3}}}, {{a0, a1, a2, a3}}, "
        f"{{${b + 2 * k}, ${b + 2 * k + 1}}}, {{${c_in + 4 * k}, ${c_in + 4 * k + 1}, ${c_in + 4 * k + 2}, "
        f"${c_in + 4 * k + 3}}};"
        for k in range(nct)
    ]
    text = "\n".join(
        [
            "{",
            ".reg .b64 w;",
            ".reg .b32 xa, xb, x, a0, a1, a2, a3, k0, k1, k2;",
            f"mov.b32 k0, {_V3_BIAS:#x};",
            f"mov.b32 k1, {_V3_EIGHTH:#x};",
            f"mov.b32 k2, {_V3_HI_BIAS:#x};",
            *_pair3(t[0], t[1], "a0", "a1"),
            *_pair3(t[2], t[3], "a2", "a3"),
            *mmas,
            "}",
        ]
    )
    return text.replace("$S", f"${n + 8}")


def pv3_constraints(nct: int = 1) -> str:
    """:func:`pv3_ptx`'s operand constraints."""
    return ",".join(["=f"] * (4 * nct) + ["r"] * (9 + 2 * nct) + ["f"] * (4 * nct))


def pvl_ptx(nct: int = 1) -> str:
    """One 16-token step of ``O^T`` for 3-bit Lloyd-Max values (tq_k4v3), one row tile, into
    ``nct`` column tiles: each value word holds 8 codes in nibbles (3-bit codes spread to
    nibbles first), row tile ``u``'s byte ``u % 4`` of the word holding head_dim ``16 g + 2 u``
    (low nibble, row ``g``) and ``+ 1`` (high nibble, row ``g + 8``), as :func:`pv4_ptx` takes
    them, looked up in the value codebook's 8-entry register table (``key_lut.lut_words``).
    With ``n = 4 nct``: outputs ``$0..$(n-1)`` the ``C`` fragments. Inputs: ``$n..$(n+3)`` the
    words of tokens ``2 c``, ``2 c + 1``, ``2 c + 8``, ``2 c + 9``, ``$(n+4)`` the row tile's
    selector of their bytes into bytes 0 and 2 (as :func:`pv4_ptx`'s, not read here),
    ``$(n+5)`` into bytes 0 and 1; then the table's four words, the probabilities' two ``B``
    registers per column tile and the ``C`` fragments so far. Per pair of tokens: the two
    codes of each row in the low bytes of one selector nibble pair, two table permutes and
    two permutes into fp16 pairs (a token's code in each half)."""
    n = 4 * nct
    t0 = n + 6
    b = t0 + 4
    c_in = b + 2 * nct
    la, lb, ha, hb = (f"${t0 + i}" for i in range(4))

    def pair(wa: int, wb: int, lo: str, hi: str) -> list[str]:
        return [
            f"prmt.b32 m, ${n + wa}, ${n + wb}, ${n + 5};",
            f"prmt.b32 l, {la}, {lb}, m;",
            f"prmt.b32 h, {ha}, {hb}, m;",
            f"prmt.b32 {lo}, l, h, 0x6240;",
            f"prmt.b32 {hi}, l, h, 0x7351;",
        ]

    mmas = [
        f"{MMA} {{${4 * k}, ${4 * k + 1}, ${4 * k + 2}, ${4 * k + 3}}}, {{a0, a1, a2, a3}}, "
        f"{{${b + 2 * k}, ${b + 2 * k + 1}}}, {{${c_in + 4 * k}, ${c_in + 4 * k + 1}, ${c_in + 4 * k + 2}, "
        f"${c_in + 4 * k + 3}}};"
        for k in range(nct)
    ]
    return "\n".join(
        [
            "{",
            ".reg .b32 m, l, h, a0, a1, a2, a3;",
            *pair(0, 1, "a0", "a1"),
            *pair(2, 3, "a2", "a3"),
            *mmas,
            "}",
        ]
    )


def pvl_constraints(nct: int = 1) -> str:
    """:func:`pvl_ptx`'s operand constraints."""
    return ",".join(["=f"] * (4 * nct) + ["r"] * (10 + 2 * nct) + ["f"] * (4 * nct))


# two float32 (columns 2 c and 2 c + 1 of an 8 x 8 quarter of C) to an fp16 pair, then the
# quarter transposed: the thread then holds rows 2 c, 2 c + 1 of column g, a B register
PAIR_TRANSPOSED_PTX = "{ .reg .b32 x; cvt.rn.f16x2.f32 x, $2, $1; movmatrix.sync.aligned.m8n8.trans.b16 $0, x; }"
PAIR_TRANSPOSED_CONSTRAINTS = "=r,f,f"
