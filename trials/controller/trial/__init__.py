"""What one trial gets and leaves: its launch (argv, env, paths), its folder's files, its metrics, its devices."""
