"""``python -m trials.cli`` runs the CLI, as ``python -m trials`` does."""

from trials.startup import trials_command

trials_command()
