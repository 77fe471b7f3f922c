"""The launch plan of an attention call: tile rows, kv splits and the tuning lookup."""

from __future__ import annotations

import torch
import triton

from ..device import multiprocessor_count
from ..tuning import AttentionConfig, attention_config

# the longest q_len per request that the tiles are planned for; longer requests are
# computed correctly in several query chunks, slower
MAX_QUERY_LEN = 16
# the most query rows (q heads of a GQA group times query tokens) of one program's tile
MAX_BLOCK_M = 128


def next_pow2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def longest_query(num_query_tokens: int, num_reqs: int, max_query_len: int | None) -> int:
    """The caller's ``max_query_len`` hint or, without one, the longest q_len possible when every
    request has >= 1 token. A request longer than the hint is still correct (the kernel loops
    over chunks), only slower."""
    return max_query_len if max_query_len is not None else num_query_tokens - num_reqs + 1


def plan_block_q(group_pad: int, max_query_len: int, min_rows: int = 16) -> int:
    """Query tokens per program chunk for a batch whose longest request has ``max_query_len``,
    so that the tile has at least ``min_rows`` rows (a power of two >= 16: tl.dot needs 16)
    where MAX_BLOCK_M allows."""
    q = next_pow2(max(1, min(max_query_len, MAX_QUERY_LEN)))
    q = max(q, min_rows // group_pad if group_pad < min_rows else 1)
    return max(1, min(q, MAX_BLOCK_M // group_pad))


def plan_tile(
    device: torch.device, preset: str, group_pad: int, longest: int, config: AttentionConfig | None = None
) -> tuple[AttentionConfig, int]:
    """The launch parameters (``config`` or the tuned ones, looked up by the tile's natural
    rows) and the query tokens per program, padded to the parameters' ``min_rows``."""
    cfg = config or plan_config(device, preset, longest, plan_block_q(group_pad, longest) * group_pad)
    return cfg, plan_block_q(group_pad, longest, cfg.min_rows)


def plan_splits(cfg: AttentionConfig, device: torch.device, num_reqs: int, num_kv_heads: int) -> int:
    """How many programs share one (request, kv head)'s sequence: the table's fixed count, or
    enough for about ``cfg.waves`` programs per multiprocessor, at most ``cfg.max_kv_splits``."""
    if cfg.kv_splits:
        return cfg.kv_splits
    want = triton.cdiv(cfg.waves * multiprocessor_count(device), max(1, num_reqs * num_kv_heads))
    return max(1, min(cfg.max_kv_splits, want))


def plan_config(device: torch.device, preset: str, longest: int, rows: int | None = None) -> AttentionConfig:
    """The tuned launch parameters; tables are keyed by the query length (decode, verify) and,
    where an entry names them, by the tile's query rows ``rows`` (``block_q * group_pad``)."""
    return attention_config(device, preset, longest, rows)
