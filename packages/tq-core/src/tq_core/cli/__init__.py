"""The ``tq`` command. Subcommands come from the ``tq.commands`` entry-point group.

Each entry point names a ``register(subparsers)`` function that adds its subparser and
sets ``func`` (``args -> int | None``) as default, so other tq packages (tq-triton adds
``sweep``, ``bench``, ``profile``) extend the same command when installed.
"""

from __future__ import annotations

import argparse
import sys
from importlib.metadata import entry_points

from ..__about__ import __version__


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tq", description="TurboQuant KV-cache tools")
    parser.add_argument("--version", action="version", version=f"tq-core {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    # tq-core's own commands are registered directly, so `python -m tq_core.cli` also works
    # from a source tree without installed metadata; other packages arrive as entry points
    from . import capacity, demo, info

    for mod in (capacity, demo, info):
        mod.register(sub)
    broken = []
    for ep in sorted(entry_points(group="tq.commands"), key=lambda e: e.name):
        if ep.value.startswith("tq_core."):
            continue
        try:
            ep.load()(sub)
        except Exception as exc:  # a broken plugin must not take the other commands down
            broken.append(f"{ep.name} ({ep.value}): {type(exc).__name__}: {exc}")
    if broken:
        parser.epilog = "unavailable commands:\n  " + "\n  ".join(broken)
        parser.formatter_class = argparse.RawDescriptionHelpFormatter
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
