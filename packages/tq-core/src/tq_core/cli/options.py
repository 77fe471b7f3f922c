"""Subcommand parsers and the options that several tq subcommands share.

Each add_*_option function adds one option with its name, type, default and help in one
place; ``help`` and ``default`` parameters cover what differs between the commands. The
values are checked by the types in tq_core.cli.argtypes while the command line is parsed.
"""

from __future__ import annotations

import argparse

from ..presets import SUPPORTED_HEAD_DIMS
from .argtypes import positive_int, preset, preset_list

DEVICES = ("auto", "cpu", "cuda", "xpu")


def add_command(subparsers: argparse._SubParsersAction, name: str, *, help: str, doc: str) -> argparse.ArgumentParser:
    """The parser of subcommand ``name``: ``help`` in tq's command list, ``doc`` (the module
    docstring) as its description, printed with its line breaks kept."""
    return subparsers.add_parser(name, help=help, description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)


def add_device_option(parser: argparse.ArgumentParser, *, help: str) -> None:
    """``--device {auto,cpu,cuda,xpu}``, default auto."""
    parser.add_argument("--device", choices=DEVICES, default="auto", help=help)


def add_seed_option(parser: argparse.ArgumentParser, *, of: str) -> None:
    """``--seed N``, default 0; ``of`` says what it seeds."""
    parser.add_argument("--seed", type=int, default=0, help=f"seed of {of} (default 0)")


def add_head_dim_option(parser: argparse.ArgumentParser, *, default: int | None = 128, help: str) -> None:
    """``--head-dim`` from SUPPORTED_HEAD_DIMS."""
    parser.add_argument("--head-dim", type=int, choices=SUPPORTED_HEAD_DIMS, default=default, help=help)


def add_block_size_option(parser: argparse.ArgumentParser) -> None:
    """``--block-size N``: tokens per cache block, default 16."""
    parser.add_argument("--block-size", type=positive_int, default=16, help="tokens per cache block (default 16)")


def add_preset_option(parser: argparse.ArgumentParser, *, default: str) -> None:
    """``--preset NAME``: one preset."""
    parser.add_argument("--preset", type=preset, default=default, help=f"preset (default {default})")


def add_presets_option(parser: argparse.ArgumentParser, *, default: str = "all") -> None:
    """``--presets LIST``: a comma list of presets or 'all', parsed into a list of names."""
    parser.add_argument(
        "--presets", type=preset_list, default=default, help=f"comma list of presets, or 'all' (default: {default})"
    )


def add_json_option(parser: argparse.ArgumentParser, *, what: str) -> None:
    """``--json PATH``, default None; ``what`` the command writes there (see output.write_json)."""
    parser.add_argument("--json", metavar="PATH", help=f"also write {what} as JSON to PATH")


def add_quiet_option(parser: argparse.ArgumentParser, *, help: str) -> None:
    """``-q`` / ``--quiet``: a flag; ``help`` says what it silences."""
    parser.add_argument("-q", "--quiet", action="store_true", help=help)


__all__ = [
    "DEVICES",
    "add_block_size_option",
    "add_command",
    "add_device_option",
    "add_head_dim_option",
    "add_json_option",
    "add_preset_option",
    "add_presets_option",
    "add_quiet_option",
    "add_seed_option",
]
