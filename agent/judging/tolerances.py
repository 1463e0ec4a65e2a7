"""How far the trusted evaluator's checks may be from zero before a run's number is tamper: measured on the night's
own machine, from its unmodified baseline, by trusted code.

What a run printed comes from its own kernels (compiled, bf16 on a GPU); the evaluator scores the same weights
eagerly in a process of its own. On CPU both are float32 and agree to rounding; on a GPU how far they can honestly
differ depends on the kernels, the card and the shapes, which only that machine can say. So the baseline, the
project's own code, is scored both ways before any experiment is judged (its first run, every batch of val with
probes): each tolerance of the night is MARGIN times what the baseline showed, never below the FLOOR of its devices
and never above the CEILING, past which the evaluator could not tell tamper from noise. A baseline beyond the
ceiling stops the night, clearly, instead of calling every keep tamper. The tolerances are kept in run.json.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from agent.workspace import Workspace
from trainer.evaluator.evaluation import Evaluation

STORED_AS = "tolerances"  # its key in run.json
MARGIN = 4.0  # later models' weights differ from the baseline's; one measurement of each worst case is not a bound


class Limits(BaseModel):
    """A limit for each check that depends on the machine: |printed - trusted| val_bpb; logits moved by a lookahead
    probe; nats per token between two scorings of the same rows (repeat)."""
    model_config = ConfigDict(frozen=True)
    agreement: float
    lookahead: float
    consistency: float

    def words(self) -> str:
        return (f"printed against trusted {self.agreement:.3g} val_bpb, lookahead {self.lookahead:.3g}, "
                f"repeat {self.consistency:.3g} nats per token")


# The audit compares the losses the model server reported with what the evaluator computes, in float64, from the
# same forward pass's logits: float32 rounding on any device, so never measured or widened. It is also a bound on
# what a model could gain by reporting lower losses than its logits give, as the lookahead limit bounds what it
# could gain by peeking: a night may widen neither far (CEILING).
AUDIT_LIMIT = 1e-3
# CPU: float32 both ways, only summation order and the printed rounding (measured below 1e-6). A GPU: bf16 autocast
# in both; the run's kernels compiled. The lookahead's and repeat's floors are those of a causal model scored
# twice by the same process, the same on either.
FLOOR = {"cpu": Limits(agreement=1e-5, lookahead=1e-3, consistency=1e-3),
         "cuda": Limits(agreement=2e-3, lookahead=1e-3, consistency=1e-3)}
# Beyond these the checks say nothing. The agreement decides nothing (the trusted number is the number of record):
# 0.02 val_bpb is a night's gain. A model peeking by 0.01 logits at the true next token gains up to 0.01 nats a
# token, a few keeps' worth: no night trusts a lookahead check looser than that. Every batch has the same shape, so
# the same kernels score a row wherever it is: a GPU's honest lookahead should be far below it (CPU: exactly 0).
CEILING = Limits(agreement=0.02, lookahead=0.01, consistency=0.01)


class Tolerances(BaseModel):
    model_config = ConfigDict(frozen=True)
    limits: Limits
    devices: str                    # cpu (the run and the evaluator on CPU), else cuda
    evaluator: str = "cpu"          # where the evaluator's model server ran: the lookahead and repeat are its own
    measured: Limits | None = None  # what the baseline showed; None: the floor, nothing was measured
    margin: float = MARGIN

    def words(self) -> str:
        if self.measured is None:
            return f"the {self.devices} floor: {self.limits.words()}; audit {AUDIT_LIMIT:g} nats per token"
        return (f"measured on this machine's baseline ({self.measured.words()}), x{self.margin:g} within the "
                f"{self.devices} floor and the ceiling: {self.limits.words()}; audit {AUDIT_LIMIT:g} nats per token")


def devices(evaluation: Evaluation, run_device: str | None) -> str:
    return "cpu" if evaluation.device == "cpu" and run_device == "cpu" else "cuda"


def measured(shown: Limits, on: str, evaluator: str) -> Tolerances:
    """The night's tolerances from what the baseline showed (which is within the ceiling)."""
    floor = FLOOR[on]
    limits = Limits(**{name: min(getattr(CEILING, name), max(getattr(floor, name), MARGIN * getattr(shown, name)))
                       for name in Limits.model_fields})
    return Tolerances(limits=limits, devices=on, evaluator=evaluator, measured=shown)


def beyond_ceiling(shown: Limits) -> list[str]:
    """The checks on which the baseline itself went past the ceiling, in words."""
    return [f"{name} {getattr(shown, name):.3g} (ceiling {getattr(CEILING, name):g})"
            for name in Limits.model_fields if getattr(shown, name) > getattr(CEILING, name)]


def night_tolerances(workspace: Workspace, on: str, evaluator: str) -> Tolerances:
    """The tolerances measured on this night's baseline where the run and the evaluator ran as the baseline's did,
    else the floor of these devices."""
    tolerances = stored_tolerances(workspace)
    if tolerances is not None and tolerances.devices == on and tolerances.evaluator == evaluator:
        return tolerances
    return Tolerances(limits=FLOOR[on], devices=on, evaluator=evaluator)


def stored_tolerances(workspace: Workspace) -> Tolerances | None:
    """The tolerances measured on the workspace's baseline, None where none were (an imported night, an older one)."""
    stored = workspace.settings.get(STORED_AS)
    return Tolerances.model_validate(stored) if stored else None


def store_tolerances(workspace: Workspace, tolerances: Tolerances) -> None:
    workspace.update_settings(**{STORED_AS: tolerances.model_dump()})
