"""Training an experiment's commit; after a fixable crash (an ImportError, a shape error in the first
steps) the proposer that made the change may submit fixes on top of it, each committed and trained
in turn."""

from __future__ import annotations

from agent.llm.types import ProviderFatal, ProviderUnavailable, Usage
from agent.proposers.base import Crashed, Proposer, ProposerError
from agent.proposers.edits import EditRejected
from agent.recording.novelty import novelty
from agent.recording.record import FixAttempt
from agent.running.runner import RunResult
from agent.steps.in_flight import Experiment
from agent.steps.sharing import Shared
from agent.steps.training import Training
from agent.untrusted import bounded
from trainer.runs.run_id import RunId, RunKind
from trainer.runs.triage import Triage


class Fixing:
    def __init__(self, training: Training, proposer: Proposer, shared: Shared):
        self.training, self.proposer, self.shared = training, proposer, shared

    def train(self, experiment: Experiment, run: RunId, can_fix: bool) -> None:
        """Runs the commit as `run`, then each fix; its last run is experiment.result, and the fixes, their spend
        and the seconds trained go into its record."""
        workspace, limit, draft = self.training.workspace, self.training.settings.max_fix_attempts, experiment.record
        source = experiment.proposal.checked_against(workspace.file_at("train.py", draft.parent))
        result = self._run(experiment, run)
        fixes = 0
        while result.verdict.triage == Triage.FIXABLE and can_fix and fixes < limit:
            draft.fix_attempts.append(FixAttempt(commit=draft.commit, triage=result.verdict.triage.value,
                                                 reason=result.verdict.reason,
                                                 log=str(result.log_path.relative_to(workspace.dir)),
                                                 log_shown_bytes=result.log_shown_bytes))
            crashed = Crashed(experiment.id, result.verdict.triage.value, result.verdict.reason, result.tail,
                              draft.proposal.get("proposer"))
            try:
                with self.shared.proposer_turn():
                    fix = self.proposer.fix(crashed, source, experiment.transcript)
                if fix is None:
                    draft.fix_attempts.pop()  # its proposer does not fix crashes: none was attempted
                    return
                source = fix.checked_against(source)
            except (ProposerError, EditRejected, ProviderUnavailable, ProviderFatal) as err:
                # the crash stands; a dead provider stops the next turn; what the fix spent counts all the same
                experiment.transcript.event("fix_failed", reason=str(err))
                draft.llm.add(err.usage or Usage())
                return
            fixes += 1
            draft.llm.add(fix.usage)
            with self.shared.lock:
                previous = draft.commit
                draft.commit = workspace.commit_train(
                    source, f"{experiment.id}: fix {fixes}: {bounded(fix.description)}", parent=previous)
                experiment.transcript.event("committed", commit=draft.commit, parent=previous, fix=fixes,
                                            diff=workspace.diff(previous, draft.commit))
                draft.diff = workspace.diff(draft.parent, draft.commit)
                draft.novelty = novelty(workspace.file_at("train.py", draft.parent), source)
                self.shared.save_draft(draft)
            result = self._run(experiment, run.then(RunKind.FIX, fixes))

    def _run(self, experiment: Experiment, run: RunId) -> RunResult:
        result = self.training.run(experiment.record.commit, run, experiment.seed, experiment.transcript)
        experiment.result = result
        timings = experiment.record.timings
        timings.run_s = round((timings.run_s or 0.0) + result.seconds, 3)
        return result
