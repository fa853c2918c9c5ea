"""``python -m trials`` runs the CLI, set up as the ``trials`` command is (``trials.startup``)."""

from trials.startup import trials_command

trials_command()
