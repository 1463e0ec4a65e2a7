"""Training an experiment's commit; after a fixable crash (an ImportError, a shape error in the first
steps) the proposer that made the change may submit fixes on top of it, each committed and trained
in turn."""

from __future__ import annotations

from dataclasses import dataclass

from agent.llm.types import ProviderFatal, ProviderUnavailable
from agent.proposers.base import Crashed, Proposer, ProposerError
from agent.proposers.edits import EditRejected
from agent.recording.record import FixAttempt, InFlight
from agent.recording.transcript import Transcript
from agent.running.runner import RunResult
from agent.steps.sharing import Shared
from agent.steps.training import Training
from agent.untrusted import bounded
from trainer.triage import Triage


@dataclass
class Trained:
    result: RunResult           # the last run: of the commit, or of its last fix
    commit: str                 # the commit that run trained
    attempts: list[FixAttempt]
    fix_usage: list[dict]       # the LLM spend of each fix, failed ones included
    run_seconds: float


class Fixing:
    """Trains an experiment's commit, and the fixes its proposer submits after a fixable crash."""

    def __init__(self, training: Training, proposer: Proposer, shared: Shared):
        self.training, self.proposer, self.shared = training, proposer, shared

    def train(self, in_flight: InFlight, source: str, transcript: Transcript, can_fix: bool,
              name: str | None = None) -> Trained:
        """Runs the commit (logs/<name>.log, the experiment's id by default); after a fixable crash the proposer
        may submit fixes on top of it, each trained in turn."""
        workspace, limit = self.training.workspace, self.training.settings.max_fix_attempts
        name = name or in_flight.id
        result = self.training.run(in_flight.commit, name, in_flight.seed, transcript)
        trained = Trained(result, in_flight.commit, [], [], result.seconds)
        while (result.verdict.triage == Triage.FIXABLE and can_fix and hasattr(self.proposer, "fix")
               and len(trained.attempts) < limit):
            log = str(result.log_path.relative_to(workspace.dir))
            trained.attempts.append(FixAttempt(commit=trained.commit, triage=result.verdict.triage.value,
                                               reason=result.verdict.reason, log=log))
            crashed = Crashed(in_flight.id, result.verdict.triage.value, result.verdict.reason, result.tail,
                              in_flight.proposal.get("proposer"))
            try:
                with self.shared.proposer_turn():
                    fix = self.proposer.fix(crashed, source, transcript)
                source = fix.checked_against(source)
            except (ProposerError, EditRejected, ProviderUnavailable, ProviderFatal) as err:
                transcript.event("fix_failed", reason=str(err))  # the crash stands; a dead provider stops the next turn
                trained.fix_usage.append(getattr(err, "usage", None) or {})  # its spend counts all the same
                break
            number = len(trained.attempts)
            trained.fix_usage.append(fix.usage)
            previous = trained.commit
            with self.shared.lock:
                trained.commit = workspace.commit_train(
                    source, f"{in_flight.id}: fix {number}: {bounded(fix.description)}", parent=previous)
                transcript.event("committed", commit=trained.commit, parent=previous, fix=number,
                                 diff=workspace.diff(previous, trained.commit))
                in_flight.commit = trained.commit
                self.shared.begin(in_flight)
            result = self.training.run(trained.commit, f"{name}.fix{number}", in_flight.seed, transcript)
            trained.result = result
            trained.run_seconds += result.seconds
        return trained
