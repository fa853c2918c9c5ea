"""pytest plugin (placeholder until the runtime lands)."""
