"""Services the loop's results are mirrored or told to: MLflow, and webhooks (notify/)."""
