"""Benchmarks of the trial runtime and the controller: ``python -m benchmarks [PART] [--quick]``."""
