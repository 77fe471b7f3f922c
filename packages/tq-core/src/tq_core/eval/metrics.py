"""Per-window scores of one forward pass against the uncompressed one, and their means
with standard errors over windows."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch


@dataclass
class WindowScores:
    """Per-window sums over the predicted positions (every position but the last)."""

    nll: list[float] = field(default_factory=list)  # nats
    kl: list[float] = field(default_factory=list)  # KL(uncompressed || this), nats
    top1: list[int] = field(default_factory=list)  # positions whose argmax matches the uncompressed one
    tokens: list[int] = field(default_factory=list)

    def add(self, logits: torch.Tensor, ids: torch.Tensor, base_logp: torch.Tensor | None) -> torch.Tensor:
        """Score ``logits`` ``[B, T, V]`` of windows ``ids`` ``[B, T]``; returns the log-probabilities
        of the predicted positions, ``[B, T - 1, V]`` (``base_logp`` for the next passes)."""
        logp = torch.log_softmax(logits[:, :-1].float(), dim=-1)
        target = ids[:, 1:].unsqueeze(-1)
        nll = -logp.gather(-1, target).squeeze(-1).double().sum(dim=1)
        self.nll += nll.tolist()
        self.tokens += [ids.shape[1] - 1] * ids.shape[0]
        if base_logp is None:
            self.kl += [0.0] * ids.shape[0]
            self.top1 += [ids.shape[1] - 1] * ids.shape[0]
        else:
            kl = (base_logp.exp() * (base_logp - logp)).sum(dim=-1).double().sum(dim=1)
            self.kl += kl.tolist()
            self.top1 += (base_logp.argmax(-1) == logp.argmax(-1)).sum(dim=1).tolist()
        return logp


def mean_se(values: list[float]) -> tuple[float, float | None]:
    """Mean and its standard error (None for a single value)."""
    n = len(values)
    mean = math.fsum(values) / n
    if n < 2:
        return mean, None
    var = math.fsum((v - mean) ** 2 for v in values) / (n - 1)
    return mean, math.sqrt(var / n)


@dataclass(frozen=True)
class Summary:
    """One format's scores. Changes are against the uncompressed pass over the same windows;
    standard errors come from the spread of the per-window values (windows are the
    independent samples, tokens inside a window are not)."""

    ppl: float
    ppl_change: float  # fraction: 0.05 is +5%
    ppl_change_se: float | None
    bits_per_byte: float
    kl: float  # nats per predicted token
    kl_se: float | None
    top1: float  # fraction of predicted positions
    top1_se: float | None
    window_nll: list[float]  # mean nats per token of each window


def summarize(scores: WindowScores, base: WindowScores, scored_bytes: list[int]) -> Summary:
    per_tok = [n / t for n, t in zip(scores.nll, scores.tokens, strict=True)]
    base_tok = [n / t for n, t in zip(base.nll, base.tokens, strict=True)]
    delta, delta_se = mean_se([a - b for a, b in zip(per_tok, base_tok, strict=True)])
    mean_nll = math.fsum(scores.nll) / sum(scores.tokens)
    kl, kl_se = mean_se([k / t for k, t in zip(scores.kl, scores.tokens, strict=True)])
    top1, top1_se = mean_se([c / t for c, t in zip(scores.top1, scores.tokens, strict=True)])
    return Summary(
        ppl=math.exp(mean_nll),
        ppl_change=math.expm1(delta),
        ppl_change_se=None if delta_se is None else math.exp(delta) * delta_se,
        bits_per_byte=math.fsum(scores.nll) / math.log(2) / sum(scored_bytes),
        kl=kl,
        kl_se=kl_se,
        top1=top1,
        top1_se=top1_se,
        window_nll=per_tok,
    )
