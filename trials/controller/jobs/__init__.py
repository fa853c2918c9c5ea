"""A job as a resource: its registry, lock, admin, run (and in-process tune), views and REST description."""
