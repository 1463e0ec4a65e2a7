"""The crash triage classes and the verdict on a run, for the agent's modules. Runs are classified
where they run, by the run path (trainer/triage.py)."""

from trainer.triage import Triage, Verdict, classify, parse_model_config, parse_summary

__all__ = ["Triage", "Verdict", "classify", "parse_model_config", "parse_summary"]
