"""``python -m trials.cli`` runs the CLI, as ``python -m trials`` does."""

from trials.cli import run

run()
