"""Files and stamps the tq subcommands write with their results."""

from __future__ import annotations

import datetime
import json
import os
from typing import Any


def write_json(path: str | os.PathLike[str], doc: Any) -> None:
    """``doc`` as JSON (one-space indent, a final newline) to ``path``, replacing it whole: the
    text goes to a temporary file beside it first, so that a run killed while writing leaves
    the previous file, never half of one."""
    tmp = f"{os.fspath(path)}.tmp{os.getpid()}"
    try:
        with open(tmp, "w") as f:
            json.dump(doc, f, indent=1)
            f.write("\n")
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def utc_timestamp() -> str:
    """The current time as ``YYYY-MM-DD HH:MM UTC``, the date field of the commands' JSON."""
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")


__all__ = ["utc_timestamp", "write_json"]
