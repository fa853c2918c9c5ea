"""A trainer that reads its flags by hand: `--help` is not argparse's (it prints and exits 0)."""

import sys

if __name__ == "__main__":
    flags = dict(a.lstrip("-").split("=", 1) for a in sys.argv[1:] if "=" in a)
    print(f"training with {flags} (this trainer has no --help)")
