"""The ``trials`` command line: argparse subcommands; each imports what it needs when it runs."""

from __future__ import annotations

import argparse
import sys
from typing import Callable, Sequence

from trials import protocol
from trials.errors import TrialsError

Handler = Callable[[argparse.Namespace], int]


def _cmd_validate(args: argparse.Namespace) -> int:
    from trials.spec_load import load_spec
    from trials.spec_text import summary

    job = load_spec(args.spec)
    print(summary(job))
    return protocol.EXIT_OK


def _cmd_export(args: argparse.Namespace) -> int:
    from trials.spec_export import export_text
    from trials.spec_load import load_spec

    job = load_spec(args.spec)
    sys.stdout.write(export_text(job, args.format, image_uri=args.image_uri))
    return protocol.EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="trials",
        description="Run Vertex AI HyperparameterTuningJobs offline.",
    )
    parser.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    parser.add_argument("--version", action="version", version=_version())
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    p = sub.add_parser("validate", help="check a spec and print what a trial would get")
    p.add_argument("spec", help="gcloud YAML, REST JSON, legacy hptuning_config.yaml or search space")
    p.set_defaults(handler=_cmd_validate)

    p = sub.add_parser("export", help="write a spec as gcloud YAML or REST JSON")
    p.add_argument("spec")
    p.add_argument("--format", choices=("gcloud-yaml", "rest-json"), default="gcloud-yaml")
    p.add_argument("--image-uri", help="container image that replaces the local command")
    p.set_defaults(handler=_cmd_export)

    return parser


def _version() -> str:
    from trials import __version__

    return f"trials {__version__}"


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit code (2 for bad input, one line on stderr)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.handler(args)
    except KeyboardInterrupt:
        print("trials: interrupted", file=sys.stderr)
        return protocol.EXIT_INTERRUPTED
    except TrialsError as err:
        if args.debug:
            raise
        print(f"trials: error: {_one_line(str(err))}", file=sys.stderr)
        return err.exit_code
    except Exception as err:  # noqa: BLE001 - the CLI's last line of defence
        if args.debug:
            raise
        print(f"trials: internal error: {type(err).__name__}: {_one_line(str(err))} "
              f"(run with --debug for the traceback)", file=sys.stderr)
        return protocol.EXIT_ERROR


def _one_line(text: str) -> str:
    return " ".join(text.split()) if "\n" in text else text


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
