"""The Slurm backend: each trial attempt one Slurm job (a heterogeneous job for several worker pools),
each replica a task that ``entry`` starts on its node; only the controller talks to the job's storage."""
