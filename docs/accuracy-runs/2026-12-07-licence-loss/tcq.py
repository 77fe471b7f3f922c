"""Trellis-coded quantization (TCQ) of the rotated unit vector, same bits per coordinate.

Code: ``R`` bits per coordinate. A fine table of ``2^(R+1)`` levels (sorted); coordinate t's
code j picks level ``2 j + u_t`` where ``u_t`` (even or odd levels) is the parity of
``mask & state_t`` and ``state_t`` is the low bits of the previous three codes (a shift
register: ``state_{t+1} = ((state_t << 1) | (j_t & 1)) & (NSTATE - 1)``, ``state_0 = 0``). The decoder
therefore reads each coordinate from its own code and the low bits of the three codes before
it (parallel over coordinates); the encoder finds the best path with Viterbi (8 states).
"""

from __future__ import annotations

import math

import torch

NSTATE = 8  # set by set_states()


def parity(x: int) -> int:
    return bin(x).count("1") & 1


def union_of_states(mask: int) -> torch.Tensor:
    return torch.tensor([parity(s & mask) for s in range(NSTATE)], dtype=torch.long)


def viterbi(u: torch.Tensor, fine: torch.Tensor, mask: int) -> torch.Tensor:
    """u [N, d] (target coordinates, in the fine table's units) -> levels [N, d] (the decoded
    coordinates of the best path)."""
    n, d = u.shape
    L = fine.numel()
    # subsets D_k = fine[k::4], k = union + 2 * lowbit
    subs = [fine[k::4] for k in range(4)]
    un = union_of_states(mask).to(u.device)
    cost = torch.full((n, NSTATE), math.inf, dtype=u.dtype, device=u.device)
    cost[:, 0] = 0.0
    back_prev = torch.empty(d, n, NSTATE, dtype=torch.uint8)
    back_level = torch.empty(d, n, NSTATE, dtype=fine.dtype)
    # predecessor of s': (s' >> 1) | hi, hi in {0, NSTATE / 2}; bit b = s' & 1
    sp = torch.arange(NSTATE)
    pred0, pred1 = sp >> 1, (sp >> 1) | (NSTATE // 2)
    bit = sp & 1
    for t in range(d):
        x = u[:, t : t + 1]
        best_lv, best_err = [], []
        for k in range(4):
            s = subs[k]
            bnd = (s[1:] + s[:-1]) / 2
            idx = torch.searchsorted(bnd, x.contiguous())
            lv = s[idx]
            best_lv.append(lv)
            best_err.append((x - lv).square())
        lv = torch.cat(best_lv, 1)  # [N, 4]
        err = torch.cat(best_err, 1)
        # cost of arriving at s' from p: cost[p] + err[subset(u(p), b(s'))]
        k0 = un[pred0] + 2 * bit  # [8]
        k1 = un[pred1] + 2 * bit
        c0 = cost[:, pred0] + err[:, k0]
        c1 = cost[:, pred1] + err[:, k1]
        take1 = c1 < c0
        cost = torch.where(take1, c1, c0)
        back_prev[t] = take1.to(torch.uint8)
        back_level[t] = torch.where(take1, lv[:, k1], lv[:, k0])
    out = torch.empty_like(u)
    s = cost.argmin(-1)
    rows = torch.arange(n)
    for t in range(d - 1, -1, -1):
        out[:, t] = back_level[t][rows, s]
        hi = back_prev[t][rows, s].long() * (NSTATE // 2)
        s = (s >> 1) | hi
    return out


def tcq_code(x: torch.Tensor, fine: torch.Tensor, mask: int, scale: str = "ls") -> torch.Tensor:
    """Vectors [..., d] (already rotated) -> decoded rotated vectors: unit vector * sqrt(d) coded by
    Viterbi on ``fine`` (in units of 1/sqrt(d)), one fp16 scale per vector: ``ls`` the least-squares
    scale, ``fold`` ||y|| / ||c||."""
    shape = x.shape
    d = shape[-1]
    y = x.reshape(-1, d).float()
    norm = torch.linalg.vector_norm(y, dim=-1, keepdim=True)
    safe = torch.where(norm > 0, norm, torch.ones_like(norm))
    u = y / safe * math.sqrt(d)
    c = viterbi(u, fine.to(u.dtype), mask)
    if scale == "fold":
        s = norm / torch.linalg.vector_norm(c, dim=-1, keepdim=True)
    else:
        s = (y * c).sum(-1, keepdim=True) / (c * c).sum(-1, keepdim=True).clamp(min=1e-30)
    s = s.clamp(-65504, 65504).to(torch.float16).float()
    return (s * c).reshape(shape)


def train_fine(samples_u: torch.Tensor, fine: torch.Tensor, mask: int, iters: int = 5) -> torch.Tensor:
    """TC-LBG: re-estimate each fine level as the mean of the coordinates the Viterbi path maps to
    it (symmetrised)."""
    f = fine.clone()
    for _ in range(iters):
        lv = viterbi(samples_u, f, mask)
        idx = torch.searchsorted(f, lv.reshape(-1).contiguous()).clamp(max=f.numel() - 1)
        tgt = samples_u.reshape(-1)
        sums = torch.zeros_like(f).index_add_(0, idx, tgt)
        cnt = torch.zeros_like(f).index_add_(0, idx, torch.ones_like(tgt))
        new = torch.where(cnt > 0, sums / cnt.clamp(min=1), f)
        f = (new - new.flip(0)) / 2
        f, _ = torch.sort(f)
    return f


def set_states(n: int) -> None:
    """Use a shift register of log2(n) code low bits (n = 8: three previous codes)."""
    global NSTATE
    NSTATE = n


def viterbi_n(u, fine, mask, nstate):
    set_states(nstate)
    return viterbi(u, fine, mask)
