"""The tq command. Subcommands come from the "tq.commands" entry-point group.

Each entry point names a register(subparsers) function that adds its subparser and sets
func (args -> int | None) as default, so other tq packages (tq-triton adds sweep, bench,
profile) extend the same command when installed.

Contract for subcommands: argparse checks every argument while parsing (the types in
tq_core.cli.argtypes), func checks argument combinations first and raises UsageError for
a bad one, and only then looks for a device. A TQError that reaches main (for example
BackendUnavailableError: no GPU) is printed as one line, "tq <command>: <message>", on
stderr, and the exit status is 2, as for an argument error.
"""

from __future__ import annotations

import argparse
import sys
from importlib.metadata import entry_points

from ..__about__ import __version__
from ..errors import BackendUnavailableError, TQError


class UsageError(TQError, ValueError):
    """A combination of arguments that argparse cannot check alone (e.g. --q-heads not a
    multiple of --kv-heads); main prints the subcommand's usage with it and exits 2."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tq", description="TurboQuant KV-cache tools")
    parser.add_argument("--version", action="version", version=f"tq-core {__version__}")
    sub = parser.add_subparsers(
        dest="command", required=True, metavar="COMMAND", help="run 'tq COMMAND --help' for its options"
    )
    # tq-core's own commands are registered directly, so `python -m tq_core.cli` also works
    # from a source tree without installed metadata; other packages arrive as entry points
    from . import calibrate, capacity, demo, eval, info

    for mod in (calibrate, capacity, demo, eval, info):
        mod.register(sub)
    broken = []
    for ep in sorted(entry_points(group="tq.commands"), key=lambda e: e.name):
        if ep.value.startswith("tq_core."):
            continue
        try:
            ep.load()(sub)
        except Exception as exc:  # a broken plugin must not take the other commands down
            reason = " ".join(f"{type(exc).__name__}: {exc}".split())
            broken.append(f"{ep.name} ({ep.value}): {reason}")
            _register_unavailable(sub, ep.name, reason)
    if broken:
        parser.epilog = "unavailable commands:\n  " + "\n  ".join(broken)
        parser.formatter_class = argparse.RawDescriptionHelpFormatter
    return parser


def _register_unavailable(sub: argparse._SubParsersAction, name: str, reason: str) -> None:
    """A command whose plugin is installed but cannot load here (tq-triton without Triton):
    it takes any arguments and fails with one line naming the reason, exit status 2."""
    if name in sub.choices:
        return
    cmd = sub.add_parser(name, help=f"unavailable here: {reason}", description=f"unavailable here: {reason}")

    def fail(args: argparse.Namespace) -> int:
        raise BackendUnavailableError(f"unavailable here: {reason}")

    cmd.set_defaults(func=fail, any_arguments=True)


def subcommand_parsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """The subcommands' parsers by name."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra and not getattr(args, "any_arguments", False):
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    try:
        return int(args.func(args) or 0)
    except UsageError as exc:  # argparse.ArgumentParser.error prints the usage and the message, exits 2
        subcommand_parsers(parser).get(args.command, parser).error(str(exc))
    except TQError as exc:  # no device or backend, or a value the command could not use: one line
        message = " ".join(str(exc).split())
        print(f"tq {args.command}: {message}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
