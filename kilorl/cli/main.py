"""Entry point of the ``kilorl`` command.

Subcommand groups register themselves from their own modules (``train``, ``evaluate``,
``plot``, ``store``, ``cluster``); a module is imported only when its command runs, so
``kilorl store ...`` never imports torch or Ray.
"""

from __future__ import annotations

import argparse
import importlib
import sys

# command name -> (module, one-line help). Modules expose add_arguments(parser) and run(args).
COMMANDS: dict[str, tuple[str, str]] = {
    "train": ("kilorl.cli.train", "train an agent from a YAML config"),
    "eval": ("kilorl.cli.evaluate", "evaluate a run directory or checkpoint"),
    "record": ("kilorl.cli.record", "record episodes to a dataset in Minari's format"),
    "plot": ("kilorl.cli.plot", "plot learning curves of one or more runs to PNG"),
    "store": ("kilorl.cli.store", "run and inspect data-system workers"),
    "topo": ("kilorl.cli.topo", "show this machine's devices and links"),
    "plan": ("kilorl.cli.plan", "placement dry-run of a config on a described cluster"),
    "cluster": ("kilorl.cli.cluster", "describe a cluster: nodes, devices, links, placed roles"),
    "sched": ("kilorl.cli.sched", "scheduler tools (trace-driven simulation)"),
    "top": ("kilorl.cli.top", "live view of a run's roles: throughput and memory trends"),
}


def build_parser(argv: list[str]) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kilorl", description="kiloRL: distributed RL with a tiered data system")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    wanted = next((a for a in argv if not a.startswith("-")), None)
    for name, (module_name, help_text) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        # Only the module of the command being run is imported (keeps start-up light).
        if name == wanted:
            module = importlib.import_module(module_name)
            module.add_arguments(p)
            p.set_defaults(_run=module.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(argv)
    args = parser.parse_args(argv)
    if not getattr(args, "_run", None):
        parser.print_help()
        return 2
    code = args._run(args)
    return int(code or 0)


if __name__ == "__main__":
    sys.exit(main())
