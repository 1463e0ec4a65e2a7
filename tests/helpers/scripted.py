"""A proposer that submits a fixed list of one-edit changes, in order."""

from agent.proposers.base import Proposal, Proposer
from agent.proposers.edits import Edit


class ScriptedEdits(Proposer):
    name = "scripted"

    def __init__(self, *changes: tuple[str, str, str]):
        self.changes = list(changes)  # (description, old_string, new_string)

    def propose(self, context, transcript):
        description, old, new = self.changes.pop(0)
        return Proposal(description, [Edit(old, new)])


class ScriptedChanges(ScriptedEdits):
    """Scripted changes of several edits each: (description, [(old_string, new_string), ...])."""

    def propose(self, context, transcript):
        description, edits = self.changes.pop(0)
        return Proposal(description, [Edit(old, new) for old, new in edits])
