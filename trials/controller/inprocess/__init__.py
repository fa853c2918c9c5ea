"""The in-process replica backend: each replica a call of the objective in this process (``trials.tune``)."""
