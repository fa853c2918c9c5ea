"""What runs inside a trial: flags, context, reporting, checkpoints, logs."""
