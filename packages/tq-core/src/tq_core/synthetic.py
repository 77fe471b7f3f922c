"""Synthetic keys, values and queries with LLM-like statistics, for demos and benchmarks.

Real attention keys are far from isotropic: a few channels per head carry most of the
magnitude (often with a consistent sign, from RoPE's low-frequency pairs), every head has
its own offset, and values are closer to Gaussian. Queries point in similar directions to
the keys, so softmax is peaked rather than uniform. :class:`SyntheticKV` draws tensors
with that structure, reproducibly from a seed:

- keys ``k = mu_h + s_h * z``: ``z ~ N(0, I)``; ``s_h`` is 1 on most channels and
  ``outlier_scale`` on ``outlier_channels`` random channels of head ``h``; ``mu_h`` is a
  per-head offset, larger on the outlier channels.
- values ``v = nu_h + sigma_h * z``: per-head offset and scale, Gaussian otherwise.
- queries: per q head, a random mix of its kv head's mean key direction and noise on the
  same channel scales, scaled so that ``scale * q.k`` has a spread of a few units.

Everything is generated on the CPU in float32 from one ``torch.Generator`` and then moved
to ``device``/``dtype``, so a seed gives the same tensors on every machine.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch


@dataclass
class SyntheticKV:
    """Per-head statistics of a synthetic attention layer; draws K, V and Q from them.

    Calls draw from one generator in sequence: the same seed and the same sequence of
    calls give the same tensors.
    """

    num_kv_heads: int
    head_dim: int
    seed: int = 0
    outlier_channels: int = 4
    outlier_scale: float = 8.0
    key_offset: float = 0.5
    value_offset: float = 0.2
    logit_spread: float = 2.0
    _gen: torch.Generator = field(init=False, repr=False)
    key_scale: torch.Tensor = field(init=False, repr=False)  # [H, d]
    key_mean: torch.Tensor = field(init=False, repr=False)  # [H, d]
    value_mean: torch.Tensor = field(init=False, repr=False)  # [H, d]
    value_std: torch.Tensor = field(init=False, repr=False)  # [H, 1]

    def __post_init__(self) -> None:
        if self.num_kv_heads < 1 or self.head_dim < 1:
            raise ValueError(f"num_kv_heads={self.num_kv_heads}, head_dim={self.head_dim}: expected positive sizes")
        if not 0 <= self.outlier_channels <= self.head_dim:
            raise ValueError(f"outlier_channels={self.outlier_channels}: expected 0..head_dim")
        g = torch.Generator().manual_seed(self.seed)
        self._gen = g
        h, d = self.num_kv_heads, self.head_dim
        scale = torch.ones(h, d)
        mean = torch.randn(h, d, generator=g) * self.key_offset
        for i in range(h):
            ch = torch.randperm(d, generator=g)[: self.outlier_channels]
            scale[i, ch] = self.outlier_scale * (0.5 + torch.rand(len(ch), generator=g))
            sign = torch.randint(0, 2, (len(ch),), generator=g) * 2 - 1
            mean[i, ch] = sign * self.outlier_scale * (0.5 + torch.rand(len(ch), generator=g))
        self.key_scale = scale
        self.key_mean = mean
        self.value_mean = torch.randn(h, d, generator=g) * self.value_offset
        self.value_std = 0.5 + torch.rand(h, 1, generator=g)

    def _noise(self, shape: tuple[int, ...], device: torch.device | str, on_device: bool) -> torch.Tensor:
        if not on_device or torch.device(device).type == "cpu":
            return torch.randn(shape, generator=self._gen)
        # one draw from the CPU generator seeds the device's: the sequence stays reproducible
        # on one kind of device, and gigabytes of noise never pass through the host
        seed = int(torch.randint(0, 2**62, (1,), generator=self._gen))
        dev_gen = torch.Generator(device=device).manual_seed(seed)
        return torch.randn(shape, generator=dev_gen, device=device)

    def kv(
        self,
        num_tokens: int,
        *,
        device: torch.device | str = "cpu",
        dtype: torch.dtype = torch.float32,
        on_device: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(key, value)``, each ``[num_tokens, num_kv_heads, head_dim]``.

        ``on_device=True`` draws the noise with a generator on ``device`` (seeded from this
        one): far faster for benchmark-sized batches, but the values then depend on the
        device's random number generator, not only on the seed.
        """
        h, d = self.num_kv_heads, self.head_dim
        dev = torch.device(device) if on_device else torch.device("cpu")
        zk = self._noise((num_tokens, h, d), device, on_device)
        zv = self._noise((num_tokens, h, d), device, on_device)
        k = self.key_mean.to(dev) + self.key_scale.to(dev) * zk
        v = self.value_mean.to(dev) + self.value_std.to(dev) * zv
        return k.to(device=device, dtype=dtype), v.to(device=device, dtype=dtype)

    def query(
        self,
        num_tokens: int,
        num_q_heads: int,
        *,
        device: torch.device | str = "cpu",
        dtype: torch.dtype = torch.float32,
    ) -> torch.Tensor:
        """Queries ``[num_tokens, num_q_heads, head_dim]``; q head ``j`` reads kv head ``j // group``.

        Scaled so that, with the usual ``1/sqrt(head_dim)`` softmax scale, the logits over
        this generator's keys have a standard deviation of about ``logit_spread``.
        """
        h, d = self.num_kv_heads, self.head_dim
        if num_q_heads % h:
            raise ValueError(f"num_q_heads={num_q_heads}: expected a multiple of num_kv_heads={h}")
        g = self._gen
        kv_of = torch.arange(num_q_heads) // (num_q_heads // h)
        mean = self.key_mean[kv_of]  # [Hq, d]
        scale = self.key_scale[kv_of]
        mix = torch.rand(num_tokens, num_q_heads, 1, generator=g)
        noise = torch.randn(num_tokens, num_q_heads, d, generator=g) / math.sqrt(d)
        direction = mix * mean / mean.norm(dim=-1, keepdim=True) + noise
        # logit std for q is ||q * key_scale|| / sqrt(d) (the key's random part); set it to logit_spread
        spread = (direction * scale).norm(dim=-1, keepdim=True) / math.sqrt(d)
        q = direction * (self.logit_spread / spread.clamp_min(1e-12))
        return q.to(device=device, dtype=dtype)


def synthetic_kv(
    num_tokens: int,
    num_kv_heads: int,
    head_dim: int,
    seed: int = 0,
    *,
    device: torch.device | str = "cpu",
    dtype: torch.dtype = torch.float32,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Shortcut: ``SyntheticKV(num_kv_heads, head_dim, seed).kv(num_tokens)``."""
    return SyntheticKV(num_kv_heads, head_dim, seed).kv(num_tokens, device=device, dtype=dtype)
