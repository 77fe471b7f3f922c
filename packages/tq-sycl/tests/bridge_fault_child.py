"""A bridge child for the tests only: ``tq_sycl.bridge.child`` with injected faults.

Run as ``python bridge_fault_child.py [--claim-version V] --backend host``. Requests
``{"op": "fault", "mode": "crash" | "hang" | "exit"}`` make the child die by SIGSEGV,
hang, or exit with status 3 before answering, as a broken kernel or driver would;
``--claim-version`` makes its hello claim another tq_sycl version. The shipped child
has none of this.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from collections.abc import Iterable, Iterator

from tq_sycl.bridge import child

FAULT_EXIT_STATUS = 3


def fault(mode: str) -> None:
    if mode == "crash":
        os.kill(os.getpid(), signal.SIGSEGV)  # a real signal death, as a broken kernel gives
    elif mode == "hang":
        while True:
            time.sleep(3600)
    elif mode == "exit":
        os._exit(FAULT_EXIT_STATUS)


def with_faults(lines: Iterable[bytes]) -> Iterator[bytes]:
    """The request lines, acting on each ``fault`` request before the child sees it."""
    for line in lines:
        try:
            req = json.loads(line) if line.strip() else None
        except ValueError:
            req = None
        if isinstance(req, dict) and req.get("op") == "fault":
            fault(str(req.get("mode")))
        yield line


def main() -> int:
    parser = argparse.ArgumentParser(prog="bridge_fault_child.py")
    parser.add_argument("--claim-version")
    ns, rest = parser.parse_known_args()
    if ns.claim_version:
        child.__version__ = ns.claim_version
    serve = child.serve
    child.serve = lambda mod, backend, inp, out: serve(mod, backend, with_faults(inp), out)
    return child.main(rest)


if __name__ == "__main__":
    sys.exit(main())
