"""The Optuna adapter: the only subpackage that imports optuna (nothing is imported or configured here).

The Optuna storage is the job's single source of truth. A job is one study named after the job id:
study user attributes hold the job's record (``trials.job_meta``: its spec, state, ...); each Optuna
trial is one Vertex trial (``id = number + 1``) whose user attributes hold its Vertex state, attempts,
measurements and reasons. Trials are created up front as WAITING (``maxTrialCount`` of them, or the grid
size), so any number of controllers or workers claim them atomically and can never exceed the count.

Modules: ``storage`` (opening a storage from a URL; the outage-retrying database storage),
``journal`` (the journal file: ``journal.log``, Optuna's journal storage and batched journal writes;
``journal.cache``, what is kept beside it to read it fast; ``journal.check``, finding and repairing unreadable
journal lines), ``replay`` (the journal read without Optuna), ``space`` (the search space in Optuna's terms),
``samplers``, ``store`` (``JobStore``: one job in a storage), ``importances`` (parameter importances for
the report), ``outages`` (telling a connection outage from a failed query, retrying through it),
``leases`` (many workers on one database job: the lease table's SQL on the storage's engine),
``optuna_internals`` (every Optuna internal the others use: private modules and attributes, tables,
journal records; tested against the installed Optuna). The Optuna-free URL handling lives in the
vocabulary: ``trials.storage_url``.
"""
