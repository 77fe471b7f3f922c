"""How one batch is split between the compressed-cache attention call and the chunk path.

Pure torch, no vLLM imports, so it can be tested on its own.

- *Decode-like* requests (plain decode, speculative verification, any request that is
  past its prompt) attend to the quantized cache, their own new tokens included (they
  were stored before attention). They all go to **one** ``attention`` call per layer,
  whatever their q_len, so a verified token sees exactly what it would have seen as a
  plain decode: speculative decoding cannot change the tokens.
- *Chunk* requests (prompt chunks: prefill and chunked-prefill continuations) attend to
  their own new K/V un-quantized and to the dequantized cached prefix, one request at a
  time (see :mod:`tq_vllm.ops`).

When vLLM says which requests are still in their prompt (``is_prefilling``), that
decides; otherwise a request is decode-like when its q_len is at most the decode
threshold. A request longer than the kernel's query limit (``max_q_len``, 16 for
tq-triton) is cut into consecutive pieces; piece ``[a, b)`` of a request whose tokens end
at ``e`` gets ``seq_len - (e - b)``, which is exactly the causal view of those queries.

In the common case (decode-like requests first, as vLLM's batch reordering arranges, and
within the kernel's limit) the plan only holds views of vLLM's own metadata tensors: no
allocation and no host synchronisation, so CUDA-graph capture of uniform decode/verify
batches replays correctly.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class DecodePlan:
    """Arguments of the one ``attention`` call over the compressed cache."""

    num_reqs: int
    num_tokens: int
    query_start_loc: torch.Tensor
    seq_lens: torch.Tensor
    block_table: torch.Tensor
    token_index: torch.Tensor | None  # query rows of the call; None means rows 0..num_tokens-1
    max_q_len: int  # longest q_len of a (sub-)request in the call
    num_verify_reqs: int  # requests with q_len > 1 (statistics only)
    max_request_q_len: int  # longest q_len of a request before any cutting (statistics only)
    num_requests: int  # requests with q_len > 0 before any cutting (statistics only)


@dataclass(frozen=True)
class ChunkPlan:
    """One prompt chunk: query rows ``[q_start, q_end)`` of request ``req``."""

    req: int
    q_start: int
    q_end: int
    seq_len: int

    @property
    def q_len(self) -> int:
        return self.q_end - self.q_start

    @property
    def context_len(self) -> int:
        return self.seq_len - self.q_len


@dataclass(frozen=True)
class BatchPlan:
    decode: DecodePlan | None
    chunks: tuple[ChunkPlan, ...]


def plan_batch(
    *,
    num_reqs: int,
    query_start_loc: torch.Tensor,
    query_start_loc_cpu: torch.Tensor,
    seq_lens: torch.Tensor,
    block_table: torch.Tensor,
    decode_threshold: int,
    max_q_len: int | None = None,
    is_prefilling: torch.Tensor | None = None,
    seq_lens_cpu: torch.Tensor | None = None,
) -> BatchPlan:
    """Split a batch into one decode call and per-request prompt chunks.

    ``query_start_loc`` / ``seq_lens`` / ``block_table`` live on the compute device;
    ``query_start_loc_cpu``, ``is_prefilling`` (bool) and ``seq_lens_cpu`` (exact for
    prompt rows, as vLLM's ``seq_lens_cpu_upper_bound``) are host tensors.
    """
    if max_q_len is not None and max_q_len < 1:
        raise ValueError(f"max_q_len={max_q_len}: expected None or >= 1")
    qsl = [int(x) for x in query_start_loc_cpu[: num_reqs + 1].tolist()]
    q_lens = [qsl[r + 1] - qsl[r] for r in range(num_reqs)]
    if is_prefilling is not None:
        decode_like = [not bool(p) for p in is_prefilling[:num_reqs].tolist()]
    else:
        decode_like = [q <= decode_threshold for q in q_lens]

    nd = 0
    while nd < num_reqs and decode_like[nd]:
        nd += 1
    tail_decodes = [r for r in range(nd, num_reqs) if decode_like[r] and q_lens[r] > 0]
    chunk_rows = [r for r in range(nd, num_reqs) if not decode_like[r] and q_lens[r] > 0]
    decode_rows = [*range(nd), *tail_decodes]

    decode = _plan_decode(decode_rows, nd, tail_decodes, q_lens, qsl, max_q_len, query_start_loc, seq_lens, block_table)

    chunks: tuple[ChunkPlan, ...] = ()
    if chunk_rows:
        if is_prefilling is not None and seq_lens_cpu is not None:
            lens = [int(seq_lens_cpu[r]) for r in chunk_rows]
        else:  # host copy needed (not on the decode/CUDA-graph path)
            idx = torch.tensor(chunk_rows, device=seq_lens.device)
            lens = [int(x) for x in seq_lens.index_select(0, idx).cpu().tolist()]
        chunks = tuple(ChunkPlan(r, qsl[r], qsl[r + 1], n) for r, n in zip(chunk_rows, lens, strict=True))
        for c in chunks:
            if c.context_len < 0:
                raise ValueError(f"request {c.req}: q_len={c.q_len} exceeds seq_len={c.seq_len}")
    return BatchPlan(decode, chunks)


def _plan_decode(
    rows: list[int],
    nd: int,
    tail: list[int],
    q_lens: list[int],
    qsl: list[int],
    max_q_len: int | None,
    query_start_loc: torch.Tensor,
    seq_lens: torch.Tensor,
    block_table: torch.Tensor,
) -> DecodePlan | None:
    active = [r for r in rows if q_lens[r] > 0]
    if not active:
        return None
    longest = max(q_lens[r] for r in active)
    verify = sum(1 for r in active if q_lens[r] > 1)
    if not tail and (max_q_len is None or longest <= max_q_len):
        # views of vLLM's persistent tensors: nothing allocated, nothing synchronised
        return DecodePlan(
            num_reqs=nd,
            num_tokens=qsl[nd] - qsl[0],
            query_start_loc=query_start_loc[: nd + 1],
            seq_lens=seq_lens[:nd],
            block_table=block_table[:nd],
            token_index=None,
            max_q_len=longest,
            num_verify_reqs=verify,
            max_request_q_len=longest,
            num_requests=len(active),
        )

    # general case: pieces of at most max_q_len queries, possibly gathered
    pieces: list[tuple[int, int, int, int]] = []  # (request, first row, end row, tokens after the piece)
    for r in active:
        a, e = qsl[r], qsl[r + 1]
        step = max_q_len or (e - a)
        while a < e:
            b = min(a + step, e)
            pieces.append((r, a, b, e - b))
            a = b
    dev = seq_lens.device
    starts = [0]
    for _, a, b, _ in pieces:
        starts.append(starts[-1] + b - a)
    contiguous = pieces[0][1] == 0 and all(pieces[i][2] == pieces[i + 1][1] for i in range(len(pieces) - 1))
    token_index = None
    if not contiguous:
        token_index = torch.cat([torch.arange(a, b) for _, a, b, _ in pieces]).to(dev)
    req_index = torch.tensor([p[0] for p in pieces], device=dev)
    after = torch.tensor([p[3] for p in pieces], dtype=seq_lens.dtype, device=dev)
    return DecodePlan(
        num_reqs=len(pieces),
        num_tokens=starts[-1],
        query_start_loc=torch.tensor(starts, dtype=query_start_loc.dtype, device=dev),
        seq_lens=seq_lens.index_select(0, req_index) - after,
        block_table=block_table.index_select(0, req_index),
        token_index=token_index,
        max_q_len=max(b - a for _, a, b, _ in pieces),
        num_verify_reqs=verify,
        max_request_q_len=longest,
        num_requests=len(active),
    )
