"""One vLLM run for the end-to-end tests: ``python tqv_e2e_run.py CONFIG_JSON``.

Runs vLLM in-process (VLLM_ENABLE_V1_MULTIPROCESSING=0, so tq_vllm's counters are
visible here), generates greedily and prints ``TQV_RESULT {json}`` with the token ids,
their logprobs, tq_vllm's counters and timings.
"""

from __future__ import annotations

import json
import os
import sys
import time

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")


def logprobs(completion) -> list[float]:
    """The logprob of each generated token."""
    return [float(d[t].logprob) for t, d in zip(completion.token_ids, completion.logprobs, strict=True)]


def main() -> None:
    cfg = json.loads(sys.argv[1])
    t0 = time.perf_counter()
    from vllm import LLM, SamplingParams

    kwargs = {}
    if cfg.get("ngram"):
        kwargs["speculative_config"] = {"method": "ngram", **cfg["ngram"]}
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
    params = [SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True, logprobs=0) for n in cfg["max_tokens"]]
    outs = llm.generate(prompts, params, use_tqdm=False)
    t2 = time.perf_counter()
    import tq_vllm

    result = {
        "tokens": [list(o.outputs[0].token_ids) for o in outs],
        "logprobs": [logprobs(o.outputs[0]) for o in outs],
        "stats": tq_vllm.stats(),
        "startup_s": t1 - t0,
        "generate_s": t2 - t1,
    }
    print("TQV_RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
