"""Run a Python script under a file-size limit: ``fault_fsize.py BYTES SCRIPT ARGS...``.

A write past BYTES fails with EFBIG ("File too large"), as a full disk fails one with ENOSPC.
"""
import os
import resource
import sys

limit = int(sys.argv[1])
resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
os.execv(sys.executable, [sys.executable, *sys.argv[2:]])
