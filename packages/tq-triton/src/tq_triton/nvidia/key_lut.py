"""The register tables of 3- and 4-bit codebooks that the NVIDIA kernels (Gluon, token rows)
look codes up in with PTX byte permutes (``nvidia.lut_ptx``, ``nvidia.token_rows_ptx``), and
the selector arithmetic those kernels compile from these plain functions. The portable kernel
reads the same codebooks through a pair table instead (``codebook_decode.pair_words``).

The 8 fp16 centroids of a 3-bit codebook are 16 bytes: their low bytes fill two 32-bit
words and their high bytes two more (:func:`lut_words`). Four codes spread to selector
nibbles (:func:`selectors_fn`) pick four centroids' low and high bytes from those words in
two byte permutes.

A 16-entry codebook does not fit one 8-byte table, but tq's are symmetric (centroid
``15 - c`` is ``-centroid[c]``): the table holds the 8 magnitudes, a code's low 3 bits
(flipped for the negative half: :func:`magnitude_selectors_fn`) select its magnitude, and its
bit 3 its sign.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


def lut_words(centroids_fp16: torch.Tensor) -> torch.Tensor:
    """The register table of an 8-entry fp16 codebook: int32 ``[4]`` = (low bytes of
    centroids 0-3, of 4-7, high bytes of 0-3, of 4-7), byte ``i`` of a word holding
    centroid ``i`` (mod 4). A 16-entry codebook must be symmetric (centroid ``15 - i`` is
    ``-centroid[i]``, as every Lloyd-Max codebook of tq's is, bit for bit in fp16): its table
    holds the 8 magnitudes, centroids 8-15 (:func:`magnitude_selectors_fn`)."""
    if centroids_fp16.dtype != torch.float16 or centroids_fp16.numel() not in (8, 16):
        got = f"{centroids_fp16.dtype} {tuple(centroids_fp16.shape)}"
        raise ValueError(f"lut_words: expected 8 or 16 fp16 centroids, got {got}")
    if centroids_fp16.numel() == 16:
        if not torch.equal(centroids_fp16, -centroids_fp16.flip(0)):
            raise ValueError("lut_words: a 16-entry codebook must be symmetric (centroid 15 - i == -centroid i)")
        centroids_fp16 = centroids_fp16[8:]
    bits = centroids_fp16.detach().cpu().view(torch.int16).to(torch.int64) & 0xFFFF
    lo, hi = bits & 0xFF, bits >> 8
    words = []
    for table in (lo[:4], lo[4:], hi[:4], hi[4:]):
        w = sum(int(b) << (8 * i) for i, b in enumerate(table.tolist()))
        words.append(w - (1 << 32) if w >= 1 << 31 else w)
    return torch.tensor(words, dtype=torch.int32, device=centroids_fp16.device)


def selectors_fn(w0, w1, w2, G: tl.constexpr):
    """Selector nibbles of codes ``4G .. 4G+3`` of a 3-bit chunk (words ``w0, w1, w2``,
    uint32): the group's 12 stream bits ``12G .. 12G+11``, each code moved to its own nibble.
    Operators only, so that Triton (:data:`group_selectors`, the tests) and the Gluon kernel
    compile the same function."""
    S: tl.constexpr = (12 * G) % 32
    if G < 2:
        x = w0 >> S
    elif G == 2:
        x = (w0 >> 24) | (w1 << 8)  # bits 24..35 straddle w0 and w1
    elif G < 5:
        x = w1 >> S
    elif G == 5:
        x = (w1 >> 28) | (w2 << 4)  # bits 60..71 straddle w1 and w2
    else:
        x = w2 >> S
    # two spreading steps: code pairs to bytes, then codes to nibbles
    t = (x & 0x3F) | ((x << 2) & 0x3F00)
    return (t & 0x0707) | ((t << 1) & 0x7070)


group_selectors = triton.jit(selectors_fn)


def magnitude_selectors_fn(w):
    """The magnitude selectors of the 8 4-bit codes of each word ``w`` (uint32), nibble for
    nibble: ``c ^ 7`` where the code's bit 3 is clear, ``c & 7`` where it is set: code ``c``
    is ``+magnitude[c - 8]`` from 8 on and ``-magnitude[7 - c]`` below, one xor with 7 times
    the complement of bit 3 for the 8 nibbles of a word at once. Operators only, so that the
    Gluon and token-rows kernels compile the same function."""
    below = ((w >> 3) & 0x11111111) ^ 0x11111111  # 1 in the nibbles of codes 0-7
    return (w ^ (below * 7)) & 0x77777777
