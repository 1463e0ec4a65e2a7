"""Webhook notifications of a night (`run --notify URL`): a keep, a crash streak, a plateau, the loop stopping
and the night's end, each one POST in the body the URL's service reads (formats.py), sent from a thread per URL
so that a webhook that is slow or dead changes nothing in the night (sender.py). What happened is read from the
ledger as it grows (night.py), as the MLflow mirror reads it."""
