"""Pure decisions of the job loop: exits and their wording, stopping rules, outcome, crash summary."""
