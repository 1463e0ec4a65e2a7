"""The CLI researcher: the user's own coding-agent CLI (agent.proposers.cli.agent) proposes the one change.

Each proposal, and each fix of a fixable crash of one (its scratch train.py the crashed one), gets a fresh scratch
directory outside the workspace (agent.proposers.cli.scratch); the CLI runs there headless, with a scrubbed
environment, in its own process group and under a timeout, its event stream going to the transcript line by line.
The train.py it leaves becomes search/replace edits on the train.py it was given, which go through
the same validation and policy as every proposal. Whatever goes wrong (CLI missing, not logged in, failed, timed
out, no change, a bad proposal.json) fails this proposal with the CLI's own words; the night goes on.
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import replace
from pathlib import Path

import agent.proposers.cli.scratch as scratch_dir
from agent.llm.types import Usage
from agent.proposers.base import Crashed, Proposal, ProposalContext, ProposerError
from agent.proposers.cli.agent import CodingCLI, scrubbed_environment
from agent.proposers.cli.outcome import CLIOutcome
from agent.proposers.cli.process import run_streaming
from agent.proposers.diff_edits import edits_between
from agent.proposers.llm import CODE_ONLY_RULE, values_only_refusal
from agent.recording.notes import NotesChanged, NotesFull, read_notes, write_notes
from agent.recording.record import ExperimentRecord
from agent.recording.research_memory import lesson_due
from agent.recording.transcript import Transcript


class CLIResearcher:
    name = "cli"

    def __init__(self, cli: CodingCLI, model: str | None, workspace_dir: Path, base_url: str | None = None,
                 timeout_s: float = 1800.0, algorithmic_share: float | None = 0.5):
        self.cli, self.model = cli, model
        self.workspace_dir = workspace_dir
        self.base_url, self.timeout_s = base_url, timeout_s
        self.algorithmic_share = algorithmic_share
        self.proposed: dict[str, ProposalContext] = {}  # experiment -> what its proposal was made from, until observed

    def propose(self, context: ProposalContext, transcript: Transcript) -> Proposal:
        proposal = self._session(context, transcript)
        self.proposed[context.experiment_id] = context
        return proposal

    def fix(self, crashed: Crashed, crashed_source: str, transcript: Transcript) -> Proposal:
        """A fix for a fixable crash, by a new session in a scratch directory holding the crashed train.py."""
        if crashed.id not in self.proposed:
            raise ProposerError(f"{self.cli.name}: no proposal of experiment {crashed.id} to fix")
        context = replace(self.proposed[crashed.id], train_source=crashed_source, code_only=False, spend=Usage())
        return self._session(context, transcript, crashed)

    def observe(self, record: ExperimentRecord) -> None:
        self.proposed.pop(record.id, None)

    def _session(self, context: ProposalContext, transcript: Transcript, crashed: Crashed | None = None) -> Proposal:
        outcome = CLIOutcome()
        try:
            with tempfile.TemporaryDirectory(prefix="autoresearch-cli-") as directory:
                return self._propose_in(Path(directory).resolve(), context, transcript, outcome, crashed)
        except scratch_dir.BadScratch as err:
            raise ProposerError(f"{self.cli.name}: {err}", outcome.usage.model_copy()) from None
        except ProposerError as err:
            err.usage = outcome.usage.model_copy()
            raise
        finally:
            context.spend.add(outcome.usage)

    def _propose_in(self, scratch: Path, context: ProposalContext, transcript: Transcript,
                    outcome: CLIOutcome, crashed: Crashed | None) -> Proposal:
        notes = read_notes(self.workspace_dir)
        scratch_dir.fill(scratch, context, self.workspace_dir, notes, self.algorithmic_share,
                         CODE_ONLY_RULE if context.code_only else "")
        env = scrubbed_environment(self.cli, scratch, self.base_url)
        if (executable := shutil.which(self.cli.executable, path=env.get("PATH", ""))) is None:
            raise ProposerError(f"{self.cli.name}: `{self.cli.executable}` is not on PATH; install it and log in "
                                f"once, or choose another --proposer (PATH: {env.get('PATH', '')})")
        prompt = scratch_dir.prompt(scratch, crashed)
        argv = self.cli.command(executable, scratch, prompt, self.model)
        transcript.event("cli_request", cli=self.cli.name, model=self.model, argv=[a for a in argv if a != prompt],
                         prompt=prompt, scratch=str(scratch), environment=sorted(env))
        finished = run_streaming(argv, scratch, env, self.timeout_s,
                                 lambda line: self.cli.read_event(line, transcript, outcome))
        if finished.timed_out:
            raise ProposerError(f"{self.cli.name} did not finish within {self.timeout_s:g} s; its process group "
                                "was killed")
        if finished.returncode != 0 or outcome.failed:
            raise ProposerError(self.cli.failure(finished.returncode, finished.stderr_tail, outcome))
        if (edited := scratch_dir.edited_train(scratch)) == context.train_source:
            raise ProposerError(f"{self.cli.name} left train.py unchanged; its last words: "
                                f"{outcome.final_text.strip()[:500] or '(none)'}")
        if context.code_only and (refusal := values_only_refusal(context.train_source, edited)):
            raise ProposerError(f"{self.cli.name}: {refusal}")  # the prompt said so; the CLI may not have listened
        written = scratch_dir.proposal_file(scratch)
        self._keep_notes(scratch, notes.text, transcript)
        return Proposal(written.description, edits_between(context.train_source, edited),
                        meta={"cli": self.cli.name, "model": self.model}, usage=outcome.usage.model_copy(),
                        hypothesis=written.hypothesis, expected=written.expected, lesson=written.lesson,
                        lesson_for=self._lesson_for(written, context))

    def _lesson_for(self, written: scratch_dir.CLIProposalFile, context: ProposalContext) -> str | None:
        """The experiment the lesson is about: the one named, if it exists, else the one due."""
        if not written.lesson:
            return None
        if written.lesson_for and any(r.id == written.lesson_for for r in context.history):
            return written.lesson_for
        due = lesson_due(context.history, [r.id for r in context.running])
        return due.id if due else None

    def _keep_notes(self, scratch: Path, before: str, transcript: Transcript) -> None:
        try:
            if (text := scratch_dir.rewritten_notes(scratch, before)) is not None:
                transcript.event("notes_written", size=write_notes(self.workspace_dir, text, before).size)
        except (scratch_dir.BadScratch, NotesFull, NotesChanged) as err:
            transcript.event("notes_refused", reason=str(err))

