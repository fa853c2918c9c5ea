"""Test child: kill itself with the signal named in argv[1] (e.g. SIGSEGV, SIGABRT)."""
import os
import signal
import sys

os.kill(os.getpid(), getattr(signal, sys.argv[1]))
