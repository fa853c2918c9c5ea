"""The job's journal file: Optuna's storage over it (``log``), what is kept beside it to read it fast
(``cache``), and its check and repair (``check``)."""
