"""``python -m trials`` runs the CLI."""

from trials.cli import run

run()
