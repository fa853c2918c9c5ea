"""Test child: allocate (and touch) 8 MB at a time up to 384 MB, slowly enough to be watched."""
import time

blocks = []
for _ in range(48):
    blocks.append(b"m" * (8 * 1024 * 1024))
    time.sleep(0.01)
