"""Proposers: given the state of a run, propose one experiment (a description and edits to train.py)."""
