"""The job in a database (PostgreSQL, SQLite, MySQL): the SQL on Optuna's tables, one-transaction batches,
worker leases, waiting out connection outages, and the PostgreSQL session settings."""
