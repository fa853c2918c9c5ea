"""The host backend: replicas as local processes (exec shim, process groups, cgroup or subreaper, sandbox)."""
