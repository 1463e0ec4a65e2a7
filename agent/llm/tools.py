"""The tools the model may call, defined once (rendered per API by each provider) as models of their
arguments, which also validate every call. Their answers are the proposer's (agent/proposers/toolbox.py)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agent.llm.types import UNPARSED, ToolCall, ToolSpec

READABLE_FILES = ("train.py", "prepare.py", "program.md", "track.json")
SUBMIT = "submit_experiment"


class ReadFileArgs(BaseModel):
    """Read one file of the experiment (read-only): train.py as it is at the best commit, prepare.py (frozen:
    data, tokenizer, dataloader, evaluate_bpb), program.md (your research program) or track.json (the
    track's constants and data)."""
    model_config = ConfigDict(extra="forbid")
    path: Literal["train.py", "prepare.py", "program.md", "track.json"]


class ListExperimentsArgs(BaseModel):
    """The history of this run as a table, newest last, the best marked with *: id, status, val_bpb (mean of
    its runs) with its standard error, runs, triage class, description; noise rows are re-runs of a best
    with other seeds that measure sigma. Filters narrow it down; the hypothesis, expectation and lesson of
    each listed experiment follow the table."""
    model_config = ConfigDict(extra="forbid")
    limit: int = Field(30, ge=1, le=500, description="how many of the newest matching rows (default 30)")
    # The ledger's statuses (agent.recording.record.ExperimentStatus, which this layer cannot import; a test holds
    # them equal) and simplify, the keeps won by removing code.
    status: Literal["keep", "simplify", "discard", "crash", "interrupted", "superseded", "noise", "control"] | None = (
        Field(None, description="only this status (simplify: keeps won by removing code; superseded: beat its parent, "
                                "but the best had moved on and its edits no longer applied; control: a re-run of the "
                                "best, pooled into its runs)"))
    text: str | None = Field(None, max_length=200, description="only rows whose description, hypothesis, "
                                                              "expectation, lesson or decision contain this text")
    from_id: str | None = Field(None, max_length=20, description="only from this experiment id on, e.g. 0040")
    to_id: str | None = Field(None, max_length=20, description="only up to this experiment id")


class ReadRunLogArgs(BaseModel):
    """The last lines of every training log of one experiment: its run, its re-runs with other seeds, the
    runs of its fixes and the noise-floor runs of it, each under its own heading."""
    model_config = ConfigDict(extra="forbid")
    experiment_id: str
    tail_lines: int = Field(60, ge=1, le=400, description="lines from the end of each log")


class ShowDiffArgs(BaseModel):
    """What one experiment changed in train.py, as a unified diff."""
    model_config = ConfigDict(extra="forbid")
    experiment_id: str


class EditArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    old_string: str
    new_string: str


class SubmitArgs(BaseModel):
    """Submit the ONE change to try, as search/replace edits on train.py. Each old_string must match exactly
    one place of train.py (copy it exactly, with enough lines to be unique); edits apply in order, all or
    none. This ends your turn when the edits are valid; otherwise the tool result says precisely what to
    fix."""
    model_config = ConfigDict(extra="forbid")
    description: str = Field(min_length=1, description="one line: what changes, with the numbers")
    hypothesis: str = Field(min_length=1, max_length=600, description="why this should help, in a sentence or two")
    expected: str = Field(min_length=1, max_length=300, description='the predicted effect, e.g. "val_bpb -0.003, '
                                                                    'step time +5%"')
    lesson: str = Field("", max_length=600, description="what the result of the experiment named as awaiting a "
                                                         "lesson says, in one or two sentences (required then)")
    edits: list[EditArgs] = Field(min_length=1)


class WriteNotesArgs(BaseModel):
    """Replace notes.md, the research notes every later conversation sees: open questions, promising
    directions, dead ends and why. Send the whole new text (at most 8192 bytes); what is not in it is gone."""
    model_config = ConfigDict(extra="forbid")
    text: str = Field(description="the complete new notes, markdown")


ARGUMENTS: dict[str, type[BaseModel]] = {"read_file": ReadFileArgs, "list_experiments": ListExperimentsArgs,
                                         "read_run_log": ReadRunLogArgs, "show_diff": ShowDiffArgs,
                                         "write_notes": WriteNotesArgs, SUBMIT: SubmitArgs}


# The description is the model's docstring, once: the schema's own title and description would repeat it.
TOOLS = [ToolSpec(name, " ".join(model.__doc__.split()),
                  {k: v for k, v in model.model_json_schema().items() if k not in ("title", "description")})
         for name, model in ARGUMENTS.items()]


class BadToolCall(ValueError):
    """A call the model can correct: the message says what was wrong."""


def parse_arguments(call: ToolCall) -> BaseModel:
    """The call's arguments validated by its tool's model, or BadToolCall naming every problem."""
    if (model := ARGUMENTS.get(call.name)) is None:
        raise BadToolCall(f"there is no tool {call.name!r}; the tools are {', '.join(ARGUMENTS)}")
    if UNPARSED in call.arguments:
        raw = str(call.arguments[UNPARSED])[:200]
        raise BadToolCall(f"the arguments of {call.name} are not a JSON object: {raw!r}; send them as JSON")
    try:
        return model.model_validate(call.arguments)
    except ValidationError as err:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'arguments'}: {e['msg']}"
                             for e in err.errors())
        raise BadToolCall(f"invalid arguments for {call.name}: {problems}. Call it again with corrected "
                          "arguments") from err
