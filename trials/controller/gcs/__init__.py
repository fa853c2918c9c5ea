"""The local Cloud Storage endpoint (extra ``trials[gcs]``): the server and its start and stop with a job."""
