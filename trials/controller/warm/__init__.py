"""Warm trials (``--warm-start``): a launcher that holds a trainer's imports forks each trial into its sandbox."""
