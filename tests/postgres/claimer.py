"""Claims trials of a job as fast as it can once GO_FILE exists; prints what it got as JSON.

After its first claim it waits until every claimer (N_CLAIMERS) has made its first: they all compete,
whatever order the machine runs them in.
"""

import json
import os
import sys
import time

from trials.controller.jobs import registry
from trials.study.database.leases import SharedJob

url, job_id, mode, cap, go_file, n_claimers = (sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]),
                                               sys.argv[5], int(sys.argv[6]))
h = registry.open_job(job_id, root="unused", storage=url)
shared = SharedJob(h.store, stale_after_s=60)
h.store.frozen_trials()  # connect before the start
open(f"{go_file}.ready.{os.getpid()}", "w").close()
while not os.path.exists(go_file):
    time.sleep(0.002)
got = []
while True:
    # raw: the bare atomic WAITING -> RUNNING claim, no lock; else through the advisory lock, with the job-wide cap
    claimed = h.store.claim(h.job.study) if mode == "raw" else shared.claim(h.job.study, cap=cap)
    if not got:
        open(f"{go_file}.first.{os.getpid()}", "w").close()
        folder, name = os.path.split(go_file)
        while sum(1 for f in os.listdir(folder or ".") if f.startswith(name + ".first.")) < n_claimers:
            time.sleep(0.002)
    if claimed is None:
        break
    got.append({"id": claimed.trial_id, "params": claimed.params})
print(json.dumps(got))
