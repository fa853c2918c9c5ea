"""The local HyperparameterTuningJob: the job loop and what it drives."""
