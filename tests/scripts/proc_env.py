"""Test child: print its environment and working directory as JSON."""
import json
import os

print(json.dumps({"env": dict(os.environ), "cwd": os.getcwd()}), flush=True)
