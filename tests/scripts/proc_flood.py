"""Test child: write argv[1] MB of numbered lines to stdout, then a long line without newline."""
import sys

n_mb = int(sys.argv[1])
line = b"x" * 99 + b"\n"
out = sys.stdout.buffer
for _ in range(n_mb * 1024 * 1024 // len(line)):
    out.write(line)
out.write(b"y" * 300_000)
out.flush()
sys.stderr.write("done\n")
