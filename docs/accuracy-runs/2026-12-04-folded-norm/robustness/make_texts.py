"""The two calibration texts of the robustness table that tq has no built-in for: the
scored text itself (pydoc_data.topics, as tq eval builds it) and standard-library source
code (inspect.getsource of the fifteen of the 2026-12-03 ablation probe's modules that
have Python source, in its order: itertools is built in). Writes pydoc-topics.txt and
stdlib-source.py.txt into the folder given."""

from __future__ import annotations

import importlib
import inspect
import sys
from pathlib import Path

from tq_core.eval.text import default_text

MODULES = (
    "collections", "functools", "itertools", "json", "pathlib", "argparse", "logging", "subprocess",
    "threading", "asyncio", "email", "http.client", "unittest", "dataclasses", "typing", "re",
)  # fmt: skip


def main() -> None:
    out = Path(sys.argv[1])
    (out / "pydoc-topics.txt").write_text(default_text(), encoding="utf-8")
    mods = [importlib.import_module(m) for m in MODULES]
    src = "\n\n".join(inspect.getsource(m) for m in mods if getattr(m, "__file__", None))
    (out / "stdlib-source.py.txt").write_text(src, encoding="utf-8")


if __name__ == "__main__":
    main()
