"""Where tq_triton can run, and how to name the device for tuning lookups."""

from __future__ import annotations

import functools
import os

import torch

from tq_core import BackendUnavailableError, DeviceError


def interpreter_active() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


def check_runnable(device: torch.device) -> None:
    """Raise a clear error when Triton cannot run kernels on ``device``."""
    if device.type in ("cuda", "xpu"):
        return
    if device.type == "cpu":
        if interpreter_active():
            return
        raise BackendUnavailableError(
            "tq_triton runs on cuda or xpu tensors; for CPU tensors use tq_core.store / tq_core.attention "
            "(the same API), or set TRITON_INTERPRET=1 before importing tq_triton to run the kernels in "
            "Triton's interpreter (slow; meant for tests)"
        )
    raise DeviceError(
        f"tq_triton: device {device} is not supported (expected cuda, xpu, or cpu with TRITON_INTERPRET=1)"
    )


def default_device() -> torch.device:
    """xpu when torch.xpu is available, else cuda; raises when neither is."""
    if hasattr(torch, "xpu") and torch.xpu.is_available():
        return torch.device("xpu")
    if torch.cuda.is_available():
        return torch.device("cuda")
    raise BackendUnavailableError("tq_triton: neither torch.xpu nor torch.cuda is available")


@functools.cache
def device_key(device: torch.device) -> str:
    """A name for tuning tables: the GPU's marketing name, or ``interpreter``."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    if device.type == "xpu":
        return torch.xpu.get_device_name(device)
    return "interpreter"


@functools.cache
def multiprocessor_count(device: torch.device) -> int:
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    if device.type == "xpu":
        props = torch.xpu.get_device_properties(device)
        # Xe cores (each 8 vector engines) are what a work-group runs on
        return int(getattr(props, "gpu_subslice_count", 0) or getattr(props, "max_compute_units", 32) // 8 or 32)
    return 4
