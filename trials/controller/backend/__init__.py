"""The replica backend seam: what the job loop asks of whatever runs a replica (host processes,
in-process calls, containers, a cluster scheduler)."""
