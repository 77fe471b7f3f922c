"""A tiny Llama-style checkpoint with random weights, written locally (no downloads).

GQA (4 query heads, 2 kv heads), head_dim 64, 6 layers (vLLM keeps layers 0, 1, 4, 5 in
bf16, so layers 2 and 3 use the TurboQuant cache), vocabulary 128. On top of random
weights the output head carries a fixed permutation of the vocabulary, scaled by
``cycle_strength``: a random arrangement of the vocabulary into cycles of ``cycle_len``
tokens, so that greedy decoding falls into short repeating stretches that ngram
speculation drafts and gets accepted, while attention still decides many tokens.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import save_file

TQ_LAYERS = (2, 3)


def build_tiny_llama(
    path: str | Path,
    *,
    seed: int = 0,
    layers: int = 6,
    hidden: int = 256,
    heads: int = 4,
    kv_heads: int = 2,
    head_dim: int = 64,
    vocab: int = 128,
    intermediate: int = 512,
    cycle_strength: float = 1.0,
    cycle_len: int = 6,
) -> Path:
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": hidden,
        "intermediate_size": intermediate,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "head_dim": head_dim,
        "vocab_size": vocab,
        "max_position_embeddings": 2048,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "hidden_act": "silu",
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "bos_token_id": 1,
        "eos_token_id": 2,
    }
    (path / "config.json").write_text(json.dumps(config, indent=1))
    g = torch.Generator().manual_seed(seed)

    def rand(*shape: int, std: float) -> torch.Tensor:
        return torch.randn(*shape, generator=g) * std

    s = hidden**-0.5
    embed = rand(vocab, hidden, std=1.0)
    # prev[j]: the token whose favoured successor is j
    order = torch.randperm(vocab, generator=g).tolist()
    prev = torch.empty(vocab, dtype=torch.long)
    for c in range(0, vocab, cycle_len):
        cyc = order[c : c + cycle_len]
        for i, tok in enumerate(cyc):
            prev[cyc[(i + 1) % len(cyc)]] = tok
    head = rand(vocab, hidden, std=s) + cycle_strength * embed[prev] * s
    t = {"model.embed_tokens.weight": embed, "model.norm.weight": torch.ones(hidden), "lm_head.weight": head}
    for i in range(layers):
        p = f"model.layers.{i}."
        t[p + "self_attn.q_proj.weight"] = rand(heads * head_dim, hidden, std=2 * s)
        t[p + "self_attn.k_proj.weight"] = rand(kv_heads * head_dim, hidden, std=2 * s)
        t[p + "self_attn.v_proj.weight"] = rand(kv_heads * head_dim, hidden, std=s)
        t[p + "self_attn.o_proj.weight"] = rand(hidden, heads * head_dim, std=(heads * head_dim) ** -0.5)
        t[p + "mlp.gate_proj.weight"] = rand(intermediate, hidden, std=s)
        t[p + "mlp.up_proj.weight"] = rand(intermediate, hidden, std=s)
        t[p + "mlp.down_proj.weight"] = rand(hidden, intermediate, std=intermediate**-0.5)
        t[p + "input_layernorm.weight"] = torch.ones(hidden)
        t[p + "post_attention_layernorm.weight"] = torch.ones(hidden)
    save_file({k: v.to(torch.bfloat16).contiguous() for k, v in t.items()}, str(path / "model.safetensors"))
    return path
