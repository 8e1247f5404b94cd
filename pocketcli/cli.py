"""`pocket`: the command-line entry point. Each subcommand lives in pocketcli/commands/.

Startup stays light: the command modules import the engine, numba and the kernels inside the functions that
run them, so `pocket --help`, `--version`, `list`, `info` and `tokenize` never load them
(tests/cli/test_light_commands.py)."""
from __future__ import annotations

import argparse
import os
import sys
import traceback

EXIT_USER_ERROR = 2
EXIT_INTERRUPTED = 130
RUN_LAYOUT_DIR_ENV = "POCKET_RUN_LAYOUT_DIR"  # run_layout_store.DIR_ENV (not imported: that loads the kernels)


def command_modules() -> tuple:
    """The modules in pocketcli/commands/, in the order `pocket --help` lists them: add a new subcommand here.
    Imported by name, not found by a scan, so PyInstaller sees them."""
    from .commands import bench, chat, generate, info, models_cmd, perplexity, serve, tokenize, warmup

    return (generate, chat, tokenize, info, bench, perplexity, models_cmd, serve, warmup)


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pocket", description="PocketLLM: run LLMs locally.")
    parser.add_argument("--debug", action="store_true", help="show full tracebacks on errors")
    parser.add_argument("--version", action="store_true",
                        help="show the version, the CPU/CUDA backends available and the numba cache dir")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module in command_modules():
        module.add_parser(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = make_parser()
    args = parser.parse_args(argv)
    debug = args.debug or "--debug" in argv
    if args.version:
        from .version_report import print_version_report

        return print_version_report()
    if not args.command:
        parser.print_help()
        return EXIT_USER_ERROR
    from .errors import USER_ERRORS

    keep_run_layouts()
    try:
        return args.run(args)
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except USER_ERRORS as exc:
        if debug:
            traceback.print_exc()
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USER_ERROR
    except BrokenPipeError:
        return 0


def keep_run_layouts() -> None:
    """Let the CPU kernels keep regrouped weights in the user cache dir (a warm start maps them instead of
    regrouping: run_layout_store.py), unless the environment names another folder."""
    from . import paths

    os.environ.setdefault(RUN_LAYOUT_DIR_ENV, str(paths.run_layout_dir()))


def entry_point() -> None:
    sys.exit(main())


if __name__ == "__main__":
    entry_point()
