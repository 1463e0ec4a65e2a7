"""Taking the best home: a bundle of the night another person can check (export.py), and re-training what it
claims on this machine (reproduce.py)."""
