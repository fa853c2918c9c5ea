"""``trials check``: run a trainer for real under probes and judge what it did against the Vertex rules."""
