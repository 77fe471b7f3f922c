"""What tq_triton knows about a device, in one place: where it can run, its name for tuning
lookups, its multiprocessors, and what its compiled kernels can rely on (NVIDIA GPU, compute
capability, a saturating fp16 cast)."""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass

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


@functools.cache
def capability(device: torch.device) -> tuple[int, int]:
    """The cuda device's compute capability, (0, 0) where torch has no cuda (once per device)."""
    return torch.cuda.get_device_capability(device) if torch.cuda.is_available() else (0, 0)


def nvidia(device: torch.device) -> bool:
    """An NVIDIA GPU running compiled kernels (not the interpreter, not ROCm)."""
    return device.type == "cuda" and torch.version.hip is None and not interpreter_active()


@dataclass(frozen=True)
class DeviceFacts:
    """What a launch plan needs to know of its device (:func:`device_facts`)."""

    name: str
    nvidia: bool
    capability: tuple[int, int]
    multiprocessors: int
    # torch's device type ("cuda", "xpu", "cpu" under the interpreter)
    type: str = "cuda"

    @property
    def cast_saturates(self) -> bool:
        """Whether the attention kernels' round-toward-zero fp32 -> fp16 cast saturates finite
        values at ±65504 by itself, as IEEE 754 prescribes for that rounding: true for NVIDIA
        GPUs (``cvt.rz.f16.f32``). Elsewhere the kernels clamp the query first: the Triton
        interpreter's cast overflows to NaN, and on xpu the cast was compiled but never run."""
        return self.nvidia


def device_facts(device: torch.device) -> DeviceFacts:
    """The device's facts, after :func:`check_runnable` (which raises where Triton cannot run
    kernels on it); each is looked up once per device (the interpreter's state is read per
    call, so that tests may switch it)."""
    check_runnable(device)
    is_nvidia = nvidia(device)
    return DeviceFacts(
        name=device_key(device),
        nvidia=is_nvidia,
        capability=capability(device) if is_nvidia else (0, 0),
        multiprocessors=multiprocessor_count(device),
        type=device.type,
    )
