"""One vLLM run for the end-to-end tests: ``python tqv_e2e_run.py CONFIG_JSON``.

Runs vLLM in-process (VLLM_ENABLE_V1_MULTIPROCESSING=0, so tq_vllm's counters are
visible here), generates greedily and prints ``TQV_RESULT {json}`` with the token ids,
their logprobs, the gap between the two best logprobs at each position, tq_vllm's
counters and timings.

With ``"check_decode": true`` in the config, every attention call of tq's backend is
followed by a check of its decode-like rows (plain decode and speculative verification)
against :class:`DecodeCheck`'s float64 reference; the result carries the largest error.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")


def logprobs(completion) -> list[float]:
    """The logprob of each generated token."""
    return [float(d[t].logprob) for t, d in zip(completion.token_ids, completion.logprobs, strict=True)]


def top2_gaps(completion) -> list[float]:
    """At each position, the best logprob minus the second best (needs logprobs >= 2)."""
    gaps = []
    for d in completion.logprobs:
        best = sorted((float(x.logprob) for x in d.values()), reverse=True)
        gaps.append(best[0] - best[1])
    return gaps


class DecodeCheck:
    """An independent float64 reference for the decode-like rows of every tq attention call.

    It takes each request's query rows, q_len ``Q``, seq_len ``S`` and prefill flag from
    vLLM's own batch metadata (not from tq's plan), reads the first ``S`` cached tokens
    through vLLM's block table, decoded by ``tq_core.contract.gather_kv``, and computes
    row ``i`` with tq-core's kit ``dense_attention``: plain softmax attention over the
    first ``S - Q + i + 1`` tokens (GQA: query head j reads kv head j // group). The error
    of a row is max |tq - reference| over its heads and dims, divided by the request's
    max |V| (``attention_error`` with that scale). tq's outputs are rounded to the model dtype
    (bf16: relative 2^-9), so correct code stays near 2e-3 on any host; a row that sees
    one token more or one token less is off by that token's attention weight times a V
    difference.
    """

    def __init__(self) -> None:
        self.rows = {"verify": 0, "decode": 0}
        self.max_err = {"verify": 0.0, "decode": 0.0}
        self.worst: dict[str, Any] = {}

    def install(self) -> None:
        from tq_vllm import backend

        build, forward = backend.TQMetadataBuilder.build, backend.TQAttentionImpl.forward
        check = self

        def checked_build(self, common_prefix_len, common_attn_metadata, fast_build=False):
            md = build(self, common_prefix_len, common_attn_metadata, fast_build)
            cam, n = common_attn_metadata, common_attn_metadata.num_reqs
            prefilling = None if cam.is_prefilling is None else cam.is_prefilling[:n].tolist()
            md.tqv_requests = (cam.query_start_loc_cpu[: n + 1].tolist(), cam.seq_lens[:n].cpu().tolist(), prefilling)
            return md

        def checked_forward(self, layer, query, key, value, kv_cache, attn_metadata, output=None, **kw):
            out = forward(self, layer, query, key, value, kv_cache, attn_metadata, output, **kw)
            if attn_metadata is not None and kv_cache.numel() > 0:
                check.check(self, query, kv_cache, attn_metadata, out, layer)
            return out

        backend.TQMetadataBuilder.build = checked_build
        backend.TQAttentionImpl.forward = checked_forward
        store_check.install()

    def check(self, impl, query, kv_cache, md, out, layer=None) -> None:
        from tq_core.contract import gather_kv
        from tq_core.testing import attention_error, dense_attention
        from tq_vllm.ops import tq_cache_view

        qsl, seq_lens, prefilling = md.tqv_requests
        if prefilling is None:  # vLLM without is_prefilling: requests tq's plan did not make chunks
            chunks = {c.req for c in md.plan.chunks}
            prefilling = [r in chunks for r in range(len(seq_lens))]
        cache = tq_cache_view(kv_cache)
        q_all = query.view(-1, impl.num_heads, impl.head_size)
        o_all = out.view(-1, impl.num_heads, impl.head_size)
        for r, seq_len in enumerate(seq_lens):
            q0, q1 = qsl[r], qsl[r + 1]
            if prefilling[r] or q1 == q0:
                continue
            cal = impl.calibration_for(layer, cache.device)  # None unless a calibrated format
            k, v = gather_kv(cache, md.block_table[r], seq_len, impl.preset, impl.head_size, calibration=cal)
            # row i sees the first seq_len - q_len + i + 1 tokens (its own included)
            ref = dense_attention(q_all[q0:q1], k, v, [seq_len], [q1 - q0], impl.scale)
            v_scale = float(v.abs().max())
            kind = "verify" if q1 - q0 > 1 else "decode"
            for i in range(q1 - q0):
                err = attention_error(o_all[q0 + i], ref[i], scale=v_scale)
                self.rows[kind] += 1
                if err > self.max_err[kind]:
                    self.max_err[kind] = err
                    self.worst[kind] = {"seq_len": seq_len, "q_len": q1 - q0, "row": i}

    def result(self) -> dict:
        return {"rows": self.rows, "max_err": self.max_err, "worst": self.worst}


class StoreCheck:
    """For a calibrated format: every stored token read back from tq's cache, decoded with
    the position vLLM's batch metadata gives it (computed here, not by tq's backend), must
    match the key and value that were stored: ``|c(x_hat) - c(x)| / |c(x)|`` with ``c`` the
    layer's coding map (``gain * (x - offset_p)``) is the Lloyd-Max code's relative error
    (about 0.1 at 4 bits, 0.19 at 3); a token coded against the wrong position's offsets
    is off by the offsets' difference. The layer's calibration is read here from the file
    and the layer's name (or made here for ``"none"``), not taken from tq's backend. Also records the slot size vLLM
    allocated."""

    def __init__(self) -> None:
        self.calibration_path: str | None = None
        self.tokens = 0
        self.max_err = {"key": 0.0, "value": 0.0}
        self.slot_bytes: set[int] = set()

    def install(self) -> None:
        from tq_vllm import backend

        update = backend.TQAttentionImpl.do_kv_cache_update
        check = self

        def checked_update(self, layer, key, value, kv_cache, slot_mapping):
            update(self, layer, key, value, kv_cache, slot_mapping)
            if kv_cache.numel() > 0:
                check.slot_bytes.add(int(kv_cache.shape[-1]))
                if self.choice is not None:
                    check.check(self, layer, key, value, kv_cache, slot_mapping)

        backend.TQAttentionImpl.do_kv_cache_update = checked_update

    def check(self, impl, layer, key, value, kv_cache, slot_mapping) -> None:
        import torch
        from vllm.forward_context import get_forward_context

        from tq_core import decode_fields
        from tq_core.paged import block_fields, read_fields
        from tq_vllm.ops import tq_cache_view

        md = get_forward_context().attn_metadata
        md = md[layer.layer_name] if isinstance(md, dict) else md
        qsl, seq_lens, _ = md.tqv_requests
        pos = []
        for r, s in enumerate(seq_lens):
            q_len = qsl[r + 1] - qsl[r]
            pos += [s - q_len + j for j in range(q_len)]
        n = len(pos)
        slots = slot_mapping[:n].long()
        keep = slots >= 0
        cache = tq_cache_view(kv_cache)
        bs = cache.shape[1]
        lay = impl.preset.block_layout(impl.head_size, bs, cache.shape[2])
        fields = read_fields(block_fields(cache, lay), slots[keep] // bs, slots[keep] % bs)
        import re

        from tq_core import Calibration, LayerCalibration

        index = int(re.search(r"layers\.(\d+)\.", layer.layer_name).group(1))
        if self.calibration_path == "none":  # the identity calibration, built here independently
            zero = torch.zeros(cache.shape[2], impl.head_size)
            one = torch.ones(cache.shape[2], impl.head_size)
            cal = LayerCalibration(zero, zero, one, zero, zero, one).to(key.device)
        else:
            cal = Calibration.load(self.calibration_path).layer(index).to(key.device)  # one rank: every head
        first = torch.tensor(pos, device=key.device)[keep] == 0
        k_hat, v_hat = decode_fields(fields, impl.preset, impl.head_size, calibration=cal, first=first)
        k = key[:n][keep].float()
        v = value[:n][keep].float()
        for name, x, x_hat in (("key", k, k_hat), ("value", v, v_hat)):
            off = cal.offset(name, first)
            gain = getattr(cal, f"{name}_gain")
            err = ((x_hat - x) * gain).norm(dim=-1) / ((x - off) * gain).norm(dim=-1).clamp(min=1e-6)
            self.max_err[name] = max(self.max_err[name], float(err.max()))
        self.tokens += int(keep.sum())

    def result(self) -> dict:
        return {"tokens": self.tokens, "max_err": self.max_err, "slot_bytes": sorted(self.slot_bytes)}


store_check = StoreCheck()


def main() -> None:
    cfg = json.loads(sys.argv[1])
    t0 = time.perf_counter()
    from vllm import LLM, SamplingParams

    check = None
    if cfg.get("check_decode"):
        check = DecodeCheck()
        check.install()
    kwargs = {}
    if cfg.get("ngram"):
        kwargs["speculative_config"] = {"method": "ngram", **cfg["ngram"]}
    if cfg.get("additional_config"):
        kwargs["additional_config"] = cfg["additional_config"]
        store_check.calibration_path = cfg["additional_config"].get("tq_calibration")
    llm = LLM(
        model=cfg["model"],
        skip_tokenizer_init=True,
        kv_cache_dtype=cfg["kv_cache_dtype"],
        dtype="bfloat16",
        enforce_eager=True,
        max_model_len=512,
        max_num_seqs=cfg.get("max_num_seqs", 2),
        block_size=cfg.get("block_size", 32),
        seed=0,
        **kwargs,
    )
    t1 = time.perf_counter()
    prompts = [{"prompt_token_ids": p} for p in cfg["prompts"]]
    params = [SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True, logprobs=2) for n in cfg["max_tokens"]]
    outs = llm.generate(prompts, params, use_tqdm=False)
    t2 = time.perf_counter()
    import tq_vllm

    result = {
        "tokens": [list(o.outputs[0].token_ids) for o in outs],
        "logprobs": [logprobs(o.outputs[0]) for o in outs],
        "top2_gaps": [top2_gaps(o.outputs[0]) for o in outs],
        "stats": tq_vllm.stats(),
        "decode_check": None if check is None else check.result(),
        "store_check": store_check.result(),
        "startup_s": t1 - t0,
        "generate_s": t2 - t1,
    }
    print("TQV_RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
