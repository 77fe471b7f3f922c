"""Paged batches for tests, benchmarks and the demo: a cache over shuffled blocks plus metadata.

Everything random is drawn on the CPU from one ``torch.Generator`` and then moved to the
device, so a seed gives the same batch on every machine.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

import torch

from ..attention import attention as core_attention
from ..calibration import LayerCalibration
from ..paged import gather_kv
from ..paged import store as core_store
from ..presets import Preset, get_preset
from ..synthetic import SyntheticKV
from .reference import dense_attention


def randint(gen: torch.Generator, lo: int, hi: int) -> int:
    """A uniform int in ``[lo, hi]``."""
    return int(torch.randint(lo, hi + 1, (1,), generator=gen))


def ragged_lengths(gen: torch.Generator, num_reqs: int, max_q: int, max_seq: int) -> tuple[list[int], list[int]]:
    """``(seq_lens, q_lens)``: a mix of decode (q_len 1) and verify (q_len 1..max_q) requests."""
    q_lens = [1 if randint(gen, 0, 2) == 0 else randint(gen, 1, max_q) for _ in range(num_reqs)]
    seq_lens = [randint(gen, q, max(q, max_seq)) for q in q_lens]
    return seq_lens, q_lens


def block_tables(
    gen: torch.Generator,
    seq_lens: Sequence[int],
    block_size: int,
    *,
    spare_blocks: int = 3,
    unused: Literal["garbage", "real"] = "garbage",
) -> tuple[int, torch.Tensor, torch.Tensor]:
    """Shuffled physical blocks per request: ``(num_blocks, block_table, slot_mapping)``.

    ``block_table`` is int32 ``[R, max_blocks + 1]``; ``slot_mapping`` int64 lists every
    request's positions in order, request-major. Entries past a request's blocks hold
    ``unused``: ``"garbage"`` (negative or out-of-range ids, which must never be read) or
    ``"real"`` (ids of real blocks, so only masking by seq_len keeps them out).
    """
    nblocks = [(s + block_size - 1) // block_size for s in seq_lens]
    num_blocks = sum(nblocks) + spare_blocks
    perm = torch.randperm(num_blocks, generator=gen)
    width = max([*nblocks, 1]) + 1
    if unused == "garbage":
        table = torch.randint(-5, 3 * num_blocks + 5, (len(seq_lens), width), generator=gen, dtype=torch.int32)
        table[(table >= 0) & (table < num_blocks)] = -1
    elif unused == "real":
        table = torch.randint(0, num_blocks, (len(seq_lens), width), generator=gen, dtype=torch.int32)
    else:
        raise ValueError(f"unused={unused!r}: expected 'garbage' or 'real'")
    used, slots = 0, []
    for r, (s, n) in enumerate(zip(seq_lens, nblocks, strict=True)):
        table[r, :n] = perm[used : used + n].to(torch.int32)
        used += n
        pos = torch.arange(s)
        slots.append(table[r, pos // block_size].long() * block_size + pos % block_size)
    slot_mapping = torch.cat(slots) if slots else torch.zeros(0, dtype=torch.int64)
    return num_blocks, table, slot_mapping


def gaussian_kv(gen: torch.Generator, n: int, num_kv_heads: int, head_dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Keys with a per-token spread of norms and a few large channels; values with offsets."""
    k = torch.randn(n, num_kv_heads, head_dim, generator=gen)
    k = k * torch.rand(n, num_kv_heads, 1, generator=gen).add(0.25)
    k[..., : min(3, head_dim)] *= 6  # a few high-magnitude channels, as LLM keys have
    v = torch.randn(n, num_kv_heads, head_dim, generator=gen) + torch.randn(n, num_kv_heads, 1, generator=gen)
    return k, v


def random_calibration(gen: torch.Generator, num_kv_heads: int, head_dim: int) -> LayerCalibration:
    """A layer calibration for calibrated formats' tests: offsets of scale 3 (keys) and 1
    (values), first-position offsets drawn apart from them, and gains in ``[1/4, 4]``, all
    fp16-exact."""

    def vec(scale: float) -> torch.Tensor:
        return (torch.randn(num_kv_heads, head_dim, generator=gen) * scale).half().float()

    def gain() -> torch.Tensor:
        return (4.0 ** (2 * torch.rand(num_kv_heads, head_dim, generator=gen) - 1)).half().float()

    return LayerCalibration(vec(3.0), vec(3.0), gain(), vec(1.0), vec(1.0), gain())


@dataclass
class PagedBatch:
    """A batch of requests over a paged tq cache, with the dense K/V it was built from."""

    preset: Preset
    query: torch.Tensor  # [sum(q_lens), Hq, d]
    kv_cache: torch.Tensor  # [num_blocks, block_size, Hk, slot] uint8
    block_table: torch.Tensor  # int32 [R, max_blocks + 1]
    seq_lens: torch.Tensor  # int32 [R]
    query_start_loc: torch.Tensor  # int32 [R + 1]
    slot_mapping: torch.Tensor  # int64 [sum(seq_lens)], request-major
    key: torch.Tensor  # float32 [sum(seq_lens), Hk, d], CPU, as stored (before quantization)
    value: torch.Tensor
    scale: float
    seq_len_list: list[int]
    q_len_list: list[int]
    # calibrated formats: the layer's calibration (on the device) and each stored token's
    # position, int64 [sum(seq_lens)] on the device, aligned with slot_mapping
    calibration: LayerCalibration | None = None
    positions: torch.Tensor | None = None

    @property
    def max_query_len(self) -> int:
        return max(self.q_len_list, default=0)

    @property
    def num_q_heads(self) -> int:
        return self.query.shape[1]

    def args(self) -> tuple:
        """The positional arguments of ``attention`` (``query`` .. ``scale``)."""
        return (
            self.query,
            self.kv_cache,
            self.block_table,
            self.seq_lens,
            self.query_start_loc,
            self.preset,
            self.scale,
        )

    def extra(self) -> dict[str, LayerCalibration]:
        """The keyword arguments of ``attention`` beyond :meth:`args`: ``calibration`` for a
        calibrated format, else none."""
        return {} if self.calibration is None else {"calibration": self.calibration}

    def reference(self, out: torch.Tensor | None = None) -> torch.Tensor:
        """tq_core.attention over this batch (the reference every fast kernel must match)."""
        return core_attention(*self.args(), out=out, **self.extra())

    def decoded_kv(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Dense float32 K/V ``[sum(seq_lens), Hk, d]`` as read back from the cache (CPU)."""
        ks, vs = [], []
        for r, s in enumerate(self.seq_len_list):
            k, v = gather_kv(
                self.kv_cache, self.block_table[r], s, self.preset, self.query.shape[2], calibration=self.calibration
            )
            ks.append(k.cpu())
            vs.append(v.cpu())
        return torch.cat(ks), torch.cat(vs)

    def dense_reference(self, decoded: bool = True) -> torch.Tensor:
        """float64 :func:`dense_attention` over the decoded cache (or the original K/V)."""
        k, v = self.decoded_kv() if decoded else (self.key, self.value)
        return dense_attention(self.query, k, v, self.seq_len_list, self.q_len_list, self.scale)


def paged_batch(
    gen: torch.Generator,
    preset: str | Preset,
    seq_lens: Sequence[int],
    q_lens: Sequence[int],
    *,
    head_dim: int = 128,
    num_kv_heads: int = 2,
    group: int = 4,
    block_size: int = 16,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str = "cpu",
    spare_blocks: int = 3,
    unused: Literal["garbage", "real"] = "garbage",
    data: Literal["gaussian", "llm"] = "gaussian",
    store: Callable[..., None] = core_store,
    calibration: LayerCalibration | None = None,
) -> PagedBatch:
    """A :class:`PagedBatch`; the cache starts as random bytes, so unused slots hold garbage.

    ``data="gaussian"``: :func:`gaussian_kv` and Gaussian queries; ``data="llm"``:
    :class:`~tq_core.synthetic.SyntheticKV` keys, values and queries (peaked softmax).
    K/V go into the cache through ``store`` (``tq_core.store`` unless a backend's is given).
    A calibrated format stores against ``calibration`` (:func:`random_calibration` when
    None), with each token's position, and the keys and values first get the calibration's
    offsets added, as a model's keys carry theirs.
    """
    p = get_preset(preset)
    if len(seq_lens) != len(q_lens):
        raise ValueError(f"{len(seq_lens)} seq_lens but {len(q_lens)} q_lens")
    if any(q > s for q, s in zip(q_lens, seq_lens, strict=True)):
        raise ValueError(f"q_lens {list(q_lens)}: each must be <= its seq_len {list(seq_lens)}")
    dev = torch.device(device)
    num_blocks, table, slots = block_tables(gen, seq_lens, block_size, spare_blocks=spare_blocks, unused=unused)
    slot = p.layout(head_dim).slot_size_aligned
    cache = torch.randint(0, 256, (num_blocks, block_size, num_kv_heads, slot), generator=gen, dtype=torch.uint8)
    total, hq = sum(seq_lens), num_kv_heads * group
    if data == "gaussian":
        key, value = gaussian_kv(gen, total, num_kv_heads, head_dim)
        query = torch.randn(sum(q_lens), hq, head_dim, generator=gen)
    elif data == "llm":
        syn = SyntheticKV(num_kv_heads, head_dim, seed=randint(gen, 0, 2**31 - 1))
        key, value = syn.kv(total)
        query = syn.query(sum(q_lens), hq)
    else:
        raise ValueError(f"data={data!r}: expected 'gaussian' or 'llm'")
    cache = cache.to(dev)
    positions, extra = None, {}
    if p.calibrated:
        cal = calibration if calibration is not None else random_calibration(gen, num_kv_heads, head_dim)
        pos = torch.cat([torch.arange(s) for s in seq_lens]) if total else torch.zeros(0, dtype=torch.int64)
        cal = cal.to("cpu")
        key = key + cal.offset("key", pos == 0)
        value = value + cal.offset("value", pos == 0)
        calibration, positions = cal.to(dev), pos.to(dev)
        extra = {"calibration": calibration, "positions": positions}
    if total:
        store(key.to(dev, dtype), value.to(dev, dtype), cache, slots.to(dev), p, **extra)
    qsl = torch.zeros(len(q_lens) + 1, dtype=torch.int32)
    qsl[1:] = torch.cumsum(torch.tensor(list(q_lens), dtype=torch.int32), 0)
    return PagedBatch(
        preset=p,
        query=query.to(dev, dtype),
        kv_cache=cache,
        block_table=table.to(dev),
        seq_lens=torch.tensor(list(seq_lens), dtype=torch.int32, device=dev),
        query_start_loc=qsl.to(dev),
        slot_mapping=slots.to(dev),
        key=key,
        value=value,
        scale=head_dim**-0.5,
        seq_len_list=list(seq_lens),
        q_len_list=list(q_lens),
        calibration=calibration if p.calibrated else None,
        positions=positions,
    )
