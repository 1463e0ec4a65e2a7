"""The scratch directory a coding CLI works in, outside the workspace: train.py (the best) to edit, the research
program, the state of the night and its rules, the notes, and read-only copies of what the LLM's tools would
show (prepare.py, track.json, the experiment list, the latest diffs and log tails, all bounded). Afterwards:
the edited train.py, the proposal.json the CLI wrote, and the notes if it rewrote them, each read only as a plain
file of bounded size in scratch (our process would follow a link the CLI's sandbox could make but not follow)."""

from __future__ import annotations

import stat
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agent.llm.types import ToolCall
from agent.proposers.base import Crashed, ProposalContext
from agent.proposers.logview import prompt_tail
from agent.proposers.state.message import night_state
from agent.proposers.toolbox import ToolBox, frozen_files
from agent.recording.notes import NOTES_LIMIT, Notes
from agent.recording.research_memory import proposed
from agent.untrusted import NotPlainFile, plain_file

LATEST = 5              # experiments whose diff and log tail are copied
LOG_TAIL_LINES = 60
PROPOSAL = "proposal.json"
NOTES = "notes.md"
MAX_PROPOSAL_BYTES = 20_000
MAX_TRAIN_BYTES = 1_000_000
MAX_NOTES_BYTES = 4 * NOTES_LIMIT  # read at most; notes a little over NOTES_LIMIT get write_notes's own message

RULES = """\
## Fixed rules of this service
- Only train.py changes. prepare.py and track.json are frozen and hash-checked. Your edited train.py is turned
  into search/replace edits on the best train.py and checked like any proposal: it must be valid Python and pass
  the sandbox policy (no network or process modules, no dynamic code, nothing that touches the validation or
  holdout data, no writes outside the run directory, nothing imported from prepare.py redefined), and it must
  not change how train.py is seeded (the seed is the harness's).
- One idea per experiment. It is committed, trained for the track's fixed budget and judged by val_bpb
  (validation bits per byte, from prepare.evaluate_bpb; lower is better) against the best so far:
  {keep_rule}. Otherwise the branch is reset to the best commit.
- Faking the metric is pointless: only a better model can win.
- Where the state below says submit_experiment, that means here: edit train.py and write proposal.json; where it
  says write_notes: rewrite notes.md."""


class CLIProposalFile(BaseModel):
    """proposal.json as the CLI must write it."""
    model_config = ConfigDict(extra="ignore")
    description: str = Field(min_length=1, max_length=300)
    hypothesis: str = Field(min_length=1, max_length=1500)
    expected: str = Field(min_length=1, max_length=600)
    lesson: str = Field("", max_length=1500)
    lesson_for: str | None = Field(None, max_length=20)


class BadScratch(ValueError):
    """What the CLI left in the scratch directory cannot be used; the message says what is wrong."""


def prompt(scratch: Path, crashed: Crashed | None = None) -> str:
    """What the CLI is asked to do; after a fixable crash of its change (then train.py holds that change): fix it."""
    return f"""\
You are the researcher of an autoresearch run. Work only in this directory ({scratch}):
anything outside it and the network are refused, and you cannot train: the service trains your change.
1. Read night.md: the state of the run and its fixed rules. program.md is your research program; train.py is the
   best training script so far. reference/ holds read-only copies: prepare.py (the frozen harness), track.json,
   experiments.md (the history with hypotheses and lessons), diffs/ID.diff and logs/ID.log of the latest experiments.
2. Make ONE change by editing train.py in place. It is the only file that is used.
3. Write {PROPOSAL}, a JSON object:
   {{"description": "one line: what changes, with the numbers", "hypothesis": "why it should help",
     "expected": "the predicted effect, e.g. val_bpb -0.003, step time +5%",
     "lesson": "what the result of the experiment whose lesson is due says (empty if none is due)",
     "lesson_for": "that experiment's id, or null"}}
4. You may rewrite {NOTES} (your research notes, at most {NOTES_LIMIT} bytes; every later proposal sees them).
Stop once train.py is edited and {PROPOSAL} is written.
""" + (f"\nThis time train.py holds your last change, not the best, and it crashed ({crashed.triage}: "
       f"{crashed.reason}). The log ends with:\n```\n{prompt_tail(crashed.log_tail, LOG_TAIL_LINES)}\n```\n"
       f"Fix the cause and keep the idea; {PROPOSAL} describes the fix.\n" if crashed else "")


def fill(scratch: Path, context: ProposalContext, workspace_dir: Path, notes: Notes,
         algorithmic_share: float | None, extra_rules: str = "") -> None:
    """Writes everything the CLI reads into scratch (an empty directory)."""
    (scratch / "train.py").write_text(context.train_source)
    (scratch / "program.md").write_text(context.program_text)
    (scratch / NOTES).write_text(notes.text)
    rules = RULES.format(keep_rule=context.facts.keep_rule.words()) + (f"\n{extra_rules}" if extra_rules else "")
    (scratch / "night.md").write_text(f"{rules}\n\n## State of the run\n\n"
                                      f"{night_state(context, notes, algorithmic_share)}\n")
    reference = scratch / "reference"
    files = frozen_files(workspace_dir, context.track)
    toolbox = ToolBox(workspace_dir, {}, context.history)
    files["experiments.md"] = _answer(toolbox, "list_experiments", {"limit": 500})
    for record in [r for r in context.history if proposed(r)][-LATEST:]:
        files[f"diffs/{record.id}.diff"] = _answer(toolbox, "show_diff", {"experiment_id": record.id})
        files[f"logs/{record.id}.log"] = _answer(toolbox, "read_run_log", {"experiment_id": record.id,
                                                                           "tail_lines": LOG_TAIL_LINES})
    for name, text in files.items():
        path = reference / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        path.chmod(stat.S_IRUSR | stat.S_IRGRP)


def edited_train(scratch: Path) -> str:
    if (content := _plain_file(scratch / "train.py", MAX_TRAIN_BYTES)) is None:
        raise BadScratch("train.py is gone from the scratch directory: edit it in place, do not delete or move it")
    return content.decode(errors="replace")


def proposal_file(scratch: Path) -> CLIProposalFile:
    if (content := _plain_file(scratch / PROPOSAL, MAX_PROPOSAL_BYTES)) is None:
        raise BadScratch(f"no {PROPOSAL} was written: the change needs its description, hypothesis and expected "
                         "effect")
    try:
        return CLIProposalFile.model_validate_json(content)
    except ValidationError as err:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'the file'}: {e['msg']}" for e in err.errors())
        raise BadScratch(f"{PROPOSAL} is not a valid proposal ({problems}); it needs description, hypothesis and "
                         "expected as strings, lesson and lesson_for optional") from None


def rewritten_notes(scratch: Path, before: str) -> str | None:
    """The notes if the CLI changed them, else None; BadScratch if notes.md is a link, not a plain file, or far
    over the notes' limit (what our own process would read through a link the CLI made is not the CLI's to read)."""
    content = _plain_file(scratch / NOTES, MAX_NOTES_BYTES)
    text = before if content is None else content.decode(errors="replace")
    return text if text != before else None


def _plain_file(path: Path, limit: int) -> bytes | None:
    try:
        return plain_file(path, limit)
    except NotPlainFile as err:
        raise BadScratch(f"{err} in the scratch directory") from None


def _answer(toolbox: ToolBox, tool: str, arguments: dict) -> str:
    return toolbox.run(ToolCall(id=tool, name=tool, arguments=arguments)).content
