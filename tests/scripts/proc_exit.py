"""Test child: print a line to each stream, then exit with the code given as argv[1]."""
import sys

print("out line", flush=True)
print("err line", file=sys.stderr, flush=True)
sys.exit(int(sys.argv[1]))
