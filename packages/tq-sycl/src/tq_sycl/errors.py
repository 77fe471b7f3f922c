"""tq-sycl's exceptions: tq_core's hierarchy, plus the bridge's failure modes."""

from __future__ import annotations

from tq_core.errors import BackendUnavailableError, TQError


class KernelChoiceError(TQError, ValueError):
    """``kernel=`` names no kernel family of tq_sycl."""


class BridgeError(BackendUnavailableError):
    """The bridge child process could not serve a request."""


class BridgeTimeoutError(BridgeError):
    """The child did not answer in time; it has been killed."""


class BridgeCrashError(BridgeError):
    """The child exited (crash, signal or exit) before answering."""


class BridgeProtocolError(BridgeError):
    """The child answered something that is not the bridge protocol."""


class BridgeVersionError(BridgeProtocolError):
    """The child's tq_sycl, compiled module or protocol version differs from the parent's."""


__all__ = [
    "BridgeCrashError",
    "BridgeError",
    "BridgeProtocolError",
    "BridgeTimeoutError",
    "BridgeVersionError",
    "KernelChoiceError",
]
