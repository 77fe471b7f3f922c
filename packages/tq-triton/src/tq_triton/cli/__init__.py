"""tq-triton's tq subcommands (sweep, bench, profile), registered through "tq.commands".

They follow the contract of tq_core.cli: arguments are checked while parsing, and the GPU
is looked for afterwards with gpu_device(), whose BackendUnavailableError tq's main prints
as one line ("tq bench: needs a cuda or xpu GPU ...") with exit status 2.
"""

from __future__ import annotations

import torch

from tq_core import BackendUnavailableError

from ..device import default_device

NO_GPU = "needs a cuda or xpu GPU (torch.cuda and torch.xpu are unavailable); tq demo and tq capacity run on the CPU"


def gpu_device() -> torch.device:
    """The GPU the commands run on (xpu, else cuda); BackendUnavailableError when there is none."""
    try:
        return default_device()
    except BackendUnavailableError:
        raise BackendUnavailableError(NO_GPU) from None
