"""A package that exists only in the test image, never on the host: a trainer importing it runs only there."""

OFFSET = 0.25
