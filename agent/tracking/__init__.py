"""Experiment tracking services the loop's results are mirrored to (MLflow)."""
