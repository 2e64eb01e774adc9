"""The ``fedsheaf`` command line: run, graph, keys, sweep, report, watch, ufm, bench, …"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import importlib
import io
import os
import re
import shlex
import signal
import sys
import time
from typing import Any, NoReturn

from fedsheaf import __version__
from fedsheaf.ops.processes import Terminated
from fedsheaf.util.errors import FedsheafError
from fedsheaf.util.log import RANK_VARIABLES as RANK_VARIABLES
from fedsheaf.util.log import configure as configure_logging
from fedsheaf.util.log import get_logger, launched_rank

logger = get_logger(__name__)


def _run(args: argparse.Namespace) -> int:
    from fedsheaf.launch.job import main

    return main(args.config, list(args.overrides), args.resume)


# name, module, its configure(parser) and run(args) functions, help text
SUBCOMMANDS = [
    (
        "check",
        "fedsheaf.cli.check",
        "configure",
        "run",
        "check a run's config, graph, data and run directory for N ranks, without MPI",
    ),
    ("graph", "fedsheaf.cli.graph", "configure", "run", "build or inspect graph files"),
    ("keys", "fedsheaf.cli.keys", "configure", "run", "list config keys and their meaning"),
    (
        "sweep",
        "fedsheaf.cli.sweep",
        "configure",
        "run",
        "expand a study into runs; run or list them",
    ),
    (
        "report",
        "fedsheaf.cli.report",
        "configure",
        "run",
        "comparison table and figures from run directories",
    ),
    ("watch", "fedsheaf.cli.watch", "configure", "run", "follow a running job's metrics.jsonl"),
    (
        "ufm",
        "fedsheaf.cli.ufm",
        "configure",
        "run",
        "unconstrained-feature-model federation (seed 002)",
    ),
    (
        "fedrep-linear",
        "fedsheaf.cli.fedrep_linear",
        "configure",
        "run",
        "FedRep vs FedAvg on the linear model (seed 003)",
    ),
    (
        "bench",
        "fedsheaf.cli.bench",
        "configure",
        "run",
        "performance benchmarks (results/bench/)",
    ),
    (
        "init",
        "fedsheaf.cli.init",
        "configure",
        "run",
        "copy the shipped configs/, graphs/ and slurm/ into a folder for editing",
    ),
]


class _Parser(argparse.ArgumentParser):
    """argparse whose errors are one line, naming the (sub)command and its ``--help``.

    argparse prints the usage and the error on two lines, and an unknown option after a
    subcommand (``fedsheaf check x.yaml --zzz``) under the top level's usage
    (``usage: fedsheaf [-h] [--version] COMMAND ...``), which does not help.
    """

    hint = ""
    commands: dict[str, argparse.ArgumentParser]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # no abbreviations: `--loca` must not pass for --local, nor `--resum` for --resume
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def parse_known_args(  # type: ignore[override]
        self, args: list[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        parsed, extras = super().parse_known_args(args, namespace)
        command = chosen_command(self, parsed)
        if extras and command is not self:  # the subcommand's own words, not the top's
            command.error(f"unrecognized arguments: {' '.join(extras)}")
        return parsed, extras

    def error(self, message: str) -> NoReturn:
        if message.startswith("unrecognized arguments") and self.hint:
            message = f"{message} ({self.hint})"
        elif message.startswith("argument COMMAND: invalid choice"):
            message = unknown_command(message, list(getattr(self, "commands", {})))
        self.exit(2, f"{self.prog}: error: {message}; `{self.prog} --help` says more\n")


def chosen_command(
    parser: argparse.ArgumentParser, parsed: argparse.Namespace
) -> argparse.ArgumentParser:
    """The innermost (sub)command ``parsed`` chose under ``parser`` (``fedsheaf graph
    build``'s parser for ``graph build ...``); ``parser`` itself if it has none."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            sub = action.choices.get(getattr(parsed, action.dest, ""))
            if isinstance(sub, argparse.ArgumentParser):
                return chosen_command(sub, parsed)
    return parser


def unknown_command(message: str, names: list[str]) -> str:
    """argparse's "invalid choice" for a subcommand, as "unknown command" with a guess."""
    found = re.search(r"invalid choice: '([^']*)'", message)
    if not found:
        return message
    given = found.group(1)
    close = difflib.get_close_matches(given, names, n=1)
    guess = f" (did you mean '{close[0]}'?)" if close else ""
    return f"unknown command '{given}'{guess}; the commands: {', '.join(names)}"


#: What ``fedsheaf run`` says about an option it does not know (``--epochs 3``).
RUN_HINT = (
    "fedsheaf run takes config overrides as key=value, e.g. train.epochs=3; "
    "`fedsheaf keys` lists the keys"
)


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser; only ``command``'s module is imported (all of them when None).

    Every rank of a job parses its command line, so ``fedsheaf run`` must not pay
    for importing the report, bench and theory modules (matplotlib, …).
    """
    parser = _Parser(prog="fedsheaf", description="MPI-native federated representation learning.")
    parser.add_argument("--version", action="version", version=f"fedsheaf {__version__}")
    add_verbosity(parser)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = sub.add_parser(
        "run",
        help="train one experiment (launch with mpiexec -n <ranks>)",
        description="Train one experiment under MPI, e.g. "
        "mpiexec -n 4 fedsheaf run configs/quickstart.yaml seed=3. Ranks: one per graph "
        "node for decentralized algorithms (sheaf_frl, noncoop, comfed, sheaf_fmtl); one "
        "per agent plus a server rank for fedproto and fedmuscle; for server-based "
        "algorithms (fedavg, fedrep, ...) a server rank plus 1 to federated.clients "
        "worker ranks. `fedsheaf keys` lists the config keys.",
    )
    run.add_argument(
        "config", nargs="?", help="experiment YAML file (configs/*.yaml), or a preset's name"
    )
    run.add_argument(
        "--resume",
        metavar="RUN_DIR",
        help="continue an interrupted run from its newest complete checkpoint, or train a "
        "finished one longer (with a greater train.epochs or federated.rounds); reads "
        "RUN_DIR/config.yaml, overrides still apply",
    )
    run.add_argument(
        "overrides",
        nargs="*",
        metavar="key=value",
        help="config overrides, e.g. train.epochs=3 sheaf.lam=0.1",
    )
    run.set_defaults(func=_run)
    run.hint = RUN_HINT
    parser.commands = {"run": run}

    for name, module, configure, run_fn, text in SUBCOMMANDS:
        p = sub.add_parser(name, help=text)
        parser.commands[name] = p
        if command is None or command == name:
            mod = importlib.import_module(module)
            getattr(mod, configure)(p)
            p.set_defaults(func=getattr(mod, run_fn))
    for command_parser in _parsers(sub):  # `fedsheaf sweep s.yaml -q` as `fedsheaf -q sweep`
        add_verbosity(command_parser, after_command=True)
    return parser


def add_verbosity(parser: argparse.ArgumentParser, after_command: bool = False) -> None:
    """``-q``/``--quiet`` and ``-v``/``--verbose`` (:func:`fedsheaf.util.log.configure`):
    before the command, and after it (where they do not undo what came before)."""
    default = argparse.SUPPRESS if after_command else 0
    parser.add_argument(
        "-q",
        "--quiet",
        action="count",
        default=default,
        help="say only warnings, errors and the command's result (no progress lines)",
    )
    parser.add_argument(
        "-v", "--verbose", action="count", default=default, help="say more (details)"
    )


def _parsers(sub: argparse._SubParsersAction) -> list[argparse.ArgumentParser]:
    """The parsers of ``sub``'s commands and of their own subcommands (``graph build``)."""
    found = []
    for parser in dict.fromkeys(sub.choices.values()):
        found.append(parser)
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                found += _parsers(action)
    return found


def _command(argv: list[str]) -> str | None:
    """The subcommand named on the command line, if any (before it: only options)."""
    names = {"run", *(entry[0] for entry in SUBCOMMANDS)}
    for arg in argv:
        if not arg.startswith("-"):
            return arg if arg in names else None
    return None


#: Seconds a rank other than 0 waits before exiting on an argument error (rank 0's exit
#: ends the job sooner).
QUIET_RANK_GRACE = 10.0


#: The options with a value that ``fedsheaf run`` and ``fedsheaf check`` take among their
#: positionals (CONFIG and the overrides).
VALUED_OPTIONS = {"run": ("--resume",), "check": ("--resume", "-n", "--ranks")}
#: ``-q``, ``-vv``, ``--verbose``, …: options without a value, moved with the others.
VERBOSITY = re.compile(r"-(q+|v+)|--(quiet|verbose)")


def options_first(argv: list[str]) -> list[str]:
    """``fedsheaf run``'s (``check``'s) arguments with its options moved before the
    positionals.

    argparse takes CONFIG and the overrides as one run of positionals, so overrides after
    ``--resume RUN_DIR`` (``run CONFIG --resume DIR key=value``) would be "unrecognized".
    """
    command = _command(argv)
    if command not in VALUED_OPTIONS:
        return argv
    valued = VALUED_OPTIONS[command]
    head, rest = argv[: argv.index(command) + 1], argv[argv.index(command) + 1 :]
    options: list[str] = []
    positionals: list[str] = []
    i = 0
    while i < len(rest):
        arg = rest[i]
        if arg in valued and i + 1 < len(rest):
            options += rest[i : i + 2]
            i += 2
            continue
        glued = arg.split("=", 1)[0] in valued or (arg[:2] in valued and arg[2:].isdigit())
        glued = glued or VERBOSITY.fullmatch(arg) is not None
        (options if glued else positionals).append(arg)
        i += 1
    return head + options + positionals


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    command = _command(argv) or "run"
    if command == "run":  # before the heavy imports: a stop requested during start-up
        from fedsheaf.runtime import stop_request  # (no MPI in this module)
        from fedsheaf.util import reader_gone

        stop_request.install()
        reader_gone.install()  # `fedsheaf run ... | head` must not end the run
    if command in VALUED_OPTIONS and "--" not in argv:
        argv = options_first(argv)
    parser = build_parser(command)
    if launched_rank() == 0:
        args = parser.parse_args(argv)
    else:  # under mpiexec every rank parses; only the first prints usage, help or errors
        try:
            with (
                contextlib.redirect_stdout(io.StringIO()),
                contextlib.redirect_stderr(io.StringIO()),
            ):
                args = parser.parse_args(argv)
        except SystemExit as exc:
            if exc.code not in (0, None):
                # give rank 0 time to say why: a rank that exits non-zero first makes
                # mpiexec end the job, rank 0 included, perhaps before it has printed
                time.sleep(QUIET_RANK_GRACE)
            raise
    configure_logging(getattr(args, "verbose", 0) - getattr(args, "quiet", 0))
    logger.debug(
        "fedsheaf %s, Python %s: %s", __version__, sys.version.split()[0], shlex.join(argv)
    )
    try:
        return int(args.func(args) or 0)
    except FedsheafError as exc:
        logger.error(f"fedsheaf: error: {exc}")
        return 2
    except (KeyboardInterrupt, Terminated) as exc:  # Ctrl-C; SIGTERM where it raises
        signum = exc.signum if isinstance(exc, Terminated) else signal.SIGINT
        logger.warning(f"fedsheaf {args.command}: stopped by {signal.Signals(signum).name}")
        return 128 + signum
    except BrokenPipeError:  # `fedsheaf sweep ... | head`: the reader has gone; say nothing
        if args.command == "run":  # stdout is guarded (reader_gone): another pipe broke
            raise  # on one rank of a job: the runtime's abort hook must end every rank
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # the interpreter's final flush must not fail
        return 1
    except OSError as exc:  # an output path that cannot be written, a file gone missing
        if args.command == "run":
            raise  # on one rank of a job: the runtime's abort hook must end every rank
        where = f": {exc.filename}" if exc.filename else ""
        logger.error(f"fedsheaf: error: {exc.strerror or exc}{where}")
        return 2


def entry() -> NoReturn:
    """The ``fedsheaf`` program (its console script and ``python -m fedsheaf``):
    :func:`main`, after which a rank of a job leaves without the interpreter's teardown
    (:func:`fedsheaf.runtime.world.exit_at_once`: seconds on a laptop full of ranks),
    whether it ends as usual, stopped, or refused on a user error that all ranks agreed on."""
    try:
        code = main()
    except SystemExit as exc:  # argparse's (no MPI yet), or a refusal all ranks agreed on
        if "fedsheaf.runtime.world" not in sys.modules or not isinstance(exc.code, int):
            raise
        code = exc.code
    if "fedsheaf.runtime.world" in sys.modules:  # a rank of `fedsheaf run`: MPI is up
        from fedsheaf.runtime.world import exit_at_once

        exit_at_once(code)
    sys.exit(code)


if __name__ == "__main__":
    entry()
