"""Claims trials of a job as fast as it can from a start instant; prints what it got as JSON."""

import json
import sys
import time

from trials import controller
from trials.worker import SharedJob

url, job_id, mode, cap, start_at = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), float(sys.argv[5])
h = controller.open_job(job_id, root="unused", storage=url)
shared = SharedJob(h.store, stale_after_s=60)
h.store.frozen_trials()  # connect before the start
time.sleep(max(0.0, start_at - time.time()))
got = []
while True:
    if mode == "raw":  # the bare atomic WAITING -> RUNNING claim, no lock
        claimed = h.store.claim(h.job.study)
    else:  # through the advisory lock, with the job-wide cap
        claimed = shared.claim(h.job.study, cap=cap)
    if claimed is None:
        break
    got.append({"id": claimed.trial_id, "params": claimed.params})
print(json.dumps(got))
