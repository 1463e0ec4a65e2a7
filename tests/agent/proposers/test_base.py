"""A proposal carries the train.py its edits produced once they were applied and checked."""

import pytest

from agent.proposers.base import Proposal
from agent.proposers.edits import Edit, EditRejected

PARENT = "LR = 0.04\nDEPTH = 4\n"


def test_edits_are_applied_and_checked_once_per_parent():
    proposal = Proposal("LR 0.04 -> 0.05", [Edit("LR = 0.04", "LR = 0.05")])
    source = proposal.checked_against(PARENT)
    assert source == "LR = 0.05\nDEPTH = 4\n" and proposal.applied_to == PARENT
    proposal.edits = [Edit("not in the file", "x")]  # a second check would fail: the checked result is reused
    assert proposal.checked_against(PARENT) is source
    with pytest.raises(EditRejected):  # another parent (the best moved): applied and checked again
        proposal.checked_against("LR = 0.06\n")


def test_a_change_the_policy_refuses_is_rejected_and_nothing_is_carried():
    proposal = Proposal("phone home", [Edit("DEPTH = 4", "DEPTH = 4\nimport socket")])
    with pytest.raises(EditRejected, match="socket"):
        proposal.checked_against(PARENT)
    assert proposal.source is None and proposal.applied_to is None
