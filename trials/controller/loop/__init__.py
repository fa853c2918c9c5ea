"""The job loop: the runner and its state, the supervisor and launcher of trials, their record, signals, chaos."""
