"""A researcher that remembers: a night of 60 experiments through the real loop, the real LLM proposer and
the anthropic SDK talking to the loopback server, on a runner that scores train.py from a fixed table (so the
night takes seconds); then what the 60th conversation was shown."""

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from agent.llm.pricing import PriceTable
from agent.llm.select import conversation_factory
from agent.loop import LoopSettings, run_loop
from agent.proposers.base import Proposer
from agent.proposers.llm import LLMProposer
from agent.proposers.state.groups import estimate_tokens, touched_parts
from agent.proposers.state.message import STATE_TOKEN_BUDGET, said_number
from agent.recording.ledger import Ledger
from agent.recording.notes import NOTES_LIMIT, NotesFull, append_user_note, read_notes, write_notes
from agent.recording.record import ExperimentStatus
from agent.recording.research_memory import lesson_due
from tests.helpers.llm_server import LLMServer, tool_call
from tests.helpers.synthetic_runner import SUMMARY, SyntheticRunner

ROOT = Path(__file__).resolve().parents[3]
# well past the sigma the test track's measured spread floors a synthetic night's at (agent/judging/noise.py)
GAINS = {"MATRIX_LR = 0.05": 0.080, "WARMDOWN_RATIO = 0.6": 0.048, "DEPTH = 3": 0.040, "EMBEDDING_LR = 0.8": 0.032,
         "WEIGHT_DECAY = 0.1": 0.024, "UNEMBEDDING_LR = 0.008": 0.016}
TRIES = {"MATRIX_LR": ["0.03", "0.05", "0.06", "0.045", "0.055", "0.07", "0.08"],
         "WARMDOWN_RATIO": ["0.3", "0.6", "0.7", "0.65", "0.55"],
         "EMBEDDING_LR": ["0.4", "0.8", "1.0", "0.9"],
         "WEIGHT_DECAY": ["0.1", "0.05", "0.15", "0.3", "0.12"],
         "UNEMBEDDING_LR": ["0.008", "0.006", "0.01"],
         "FINAL_LR_FRAC": ["0.05", "0.1", "0.02"],
         "DEPTH": ["64", "3", "4"],
         "ROTARY_BASE": ["50000.0", "100000.0"],
         "LOGIT_SOFTCAP": ["30.0", "10.0", "20.0", "25.0"]}
MLP = "        return self.c_proj(F.relu(self.c_fc(x)).square())"
NORM = "    return F.rms_norm(x, (x.size(-1),))"
CODE_TRIES = [("class MLP", "MLP: GELU instead of squared ReLU", MLP, MLP.replace("F.relu(self.c_fc(x)).square()",
                                                                               "F.gelu(self.c_fc(x))")),
              ("class MLP", "MLP: SiLU instead of squared ReLU", MLP, MLP.replace("F.relu(self.c_fc(x)).square()",
                                                                               "F.silu(self.c_fc(x))")),
              ("def norm", "norm with eps 1e-5", NORM, NORM.replace("(x.size(-1),))", "(x.size(-1),), eps=1e-5)")),
              ("class MLP", "MLP: plain ReLU", MLP, MLP.replace(".square()", ""))]


@dataclass
class Step:
    part: str          # what the change touches, as the test knows it (not read from any diff)
    description: str
    old: str | None    # None: the line of the hyperparameter `part` as it is at the best
    new: str


def night_plan() -> list[Step]:
    queues = {name: list(values) for name, values in TRIES.items()}
    code = list(CODE_TRIES)
    steps = []
    while len(steps) < 60:
        for name, values in queues.items():
            if values and len(steps) < 60:
                value = values.pop(0)
                steps.append(Step(name, f"{name} -> {value}", None, value))
        if code and len(steps) < 60:
            part, description, old, new = code.pop(0)
            steps.append(Step(part, description, old, new))
        if not any(queues.values()) and not code:
            for index in range(60 - len(steps)):  # a second pass over the learning rates
                steps.append(Step("FINAL_LR_FRAC", f"FINAL_LR_FRAC -> 0.0{index + 3}", None, f"0.0{index + 3}"))
    return steps


class Researcher(Proposer):
    """Plays the model: for each proposal it scripts what the model answers, from what the loop shows it
    (the best train.py and the history), then lets the real LLM proposer hold the conversation."""

    name = "llm"

    def __init__(self, proposer: LLMProposer, server: LLMServer, workspace, plan: list[Step]):
        self.proposer, self.server, self.workspace, self.plan = proposer, server, workspace, plan
        self.first_request: dict[str, int] = {}

    def propose(self, context, transcript):
        number = int(context.experiment_id)
        step = self.plan[number - 1]
        if step.old is None:
            old = next(line for line in context.train_source.splitlines() if line.startswith(f"{step.part} = "))
            new = re.sub(r"=\s*\S+", f"= {step.new}", old, count=1)
        else:
            old, new = step.old, step.new
        due = lesson_due(context.history)
        submission = {"description": step.description, "hypothesis": f"{step.part} is off for this model size",
                      "expected": "val_bpb -0.003", "edits": [{"old_string": old, "new_string": new}],
                      "lesson": f"lesson {due.id}: {due.description} ended {due.status.value}" if due else ""}
        replies = []
        if number in (10, 30, 50):  # a rewrite that keeps what the notes hold (the user's note too) and adds a line
            kept = [line for line in read_notes(self.workspace.dir).text.splitlines() if "notes of" not in line]
            replies.append(tool_call("write_notes", {"text": "\n".join([*kept, f"- notes of experiment {number}: the "
                                                                        "learning rates matter most; depth 64 runs "
                                                                        "out of memory"]) + "\n"}))
        if number == 52:
            replies.append(tool_call("write_notes", {"text": "x" * (NOTES_LIMIT + 1)}))  # too long: refused
        if number == 20:
            replies.append(tool_call("read_run_log", {"experiment_id": "0000", "tail_lines": 5}))
            replies.append(tool_call("list_experiments", {"status": "keep", "text": "lr"}))
        if number == 40:
            steered = subprocess.run([sys.executable, "-m", "agent.cli", "steer", "--tag", self.workspace.tag,
                                      "--note", "try mixture of depths next", "--workspaces",
                                      str(self.workspace.dir.parent)], capture_output=True, text=True, cwd=ROOT)
            assert steered.returncode == 0, steered.stdout + steered.stderr
        replies.append(tool_call("submit_experiment", submission))
        self.first_request[context.experiment_id] = len(self.server.requests)
        self.server.script(*replies)
        return self.proposer.propose(context, transcript)

    def observe(self, record):
        self.proposer.observe(record)


def first_user_text(body: dict) -> str:
    content = body["messages"][0]["content"]
    return content if isinstance(content, str) else "\n\n".join(b.get("text", "") for b in content)


def transcript_events(workspace, experiment_id):
    path = workspace.dir / "transcripts" / f"{experiment_id}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.fixture(scope="module")
def night(test_track, tmp_path_factory):
    """The night of 60 experiments, run once; the tests below read what it left."""
    from agent.workspace import Workspace
    root = tmp_path_factory.mktemp("workspaces")
    workspace = Workspace.create("night60", test_track.spec, ROOT / "prompts" / "program.md", root=root)
    plan = night_plan()
    with LLMServer() as server, pytest.MonkeyPatch.context() as env:
        env.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
        env.setenv("ANTHROPIC_BASE_URL", server.anthropic_base_url())
        proposer = LLMProposer(conversation_factory("anthropic:claude-opus-4-5"), workspace.dir, PriceTable(),
                               retry_base_s=0.01, outage_window_s=10)
        researcher = Researcher(proposer, server, workspace, plan)
        run_loop(workspace, researcher, SyntheticRunner(GAINS, crashes=("DEPTH = 64",)),
                 LoopSettings(max_experiments=61, max_hours=10.0, max_cost_usd=50.0, overlap=False),
                 say=lambda _: None)
        assert server.pending == 0 and server.refusals == []
        requests = list(server.requests)
    return workspace, plan, researcher.first_request, requests


def test_the_60th_conversation_sees_the_whole_night_in_bounded_space(night):
    workspace, plan, first_request, requests = night
    records = Ledger(workspace.dir).records
    experiments = [r for r in records if r.is_experiment and r.id != "0000"]
    assert len(experiments) == 60 and [r.id for r in experiments][-1] == "0060"
    message = first_user_text(requests[first_request["0060"]].body)

    # train.py comes first, then the state of the night, which stays under the budget
    assert message.startswith("train.py at the best commit")
    state = message.split("```\n\n", 1)[1]
    assert "MATRIX_LR = 0.05" in message.split("```\n\n", 1)[0]  # the best's train.py, with its keeps
    assert estimate_tokens(state) < STATE_TOKEN_BUDGET and len(state) < STATE_TOKEN_BUDGET * 3.5

    # every keep, with its hypothesis and the lesson a later proposal drew from it
    keeps = [r for r in experiments if r.status == ExperimentStatus.KEEP]
    assert {r.description for r in keeps} >= {"MATRIX_LR -> 0.05", "WARMDOWN_RATIO -> 0.6", "DEPTH -> 3",
                                                  "EMBEDDING_LR -> 0.8", "WEIGHT_DECAY -> 0.1",
                                                  "UNEMBEDDING_LR -> 0.008"}
    keep_lines = {line.split()[1]: line for line in state.splitlines() if line.startswith("- ") and "| why:" in line}
    for r in keeps:
        lesson = next(x.lesson for x in records if x.lesson_for == r.id)
        assert lesson.startswith(f"lesson {r.id}:")
        assert r.id in keep_lines and lesson in keep_lines[r.id], keep_lines.get(r.id)
        assert f"why: {r.hypothesis}" in keep_lines[r.id]

    # the rest of the night grouped by what the diffs touched, with counts the test knows from its plan (0060
    # sees 0001..0059: the last five of them in full, the ones before grouped)
    earlier = experiments[:-6]
    for part in ("MATRIX_LR", "WEIGHT_DECAY", "class MLP", "LOGIT_SOFTCAP"):
        mine = [r for r, step in zip(experiments, plan, strict=True) if step.part == part and r in earlier]
        kept = sum(r.status == ExperimentStatus.KEEP for r in mine)
        assert re.search(rf"^- {re.escape(part)}: {len(mine)} tr(y|ies), {kept} kept", state, re.MULTILINE), part
    assert re.search(r"^- DEPTH: \d tries, 1 kept, 1 crashed", state, re.MULTILINE)
    # the last five in full, each with its hypothesis, expectation and decision
    for r in experiments[-6:-1]:
        assert f"- {r.id} " in state and f"expected: {r.expected}" in state

    # the notes (the model's latest rewrite and the user's note), budget left, hardware, best run's numbers
    assert "notes of experiment 50" in state and "(from the user" in state and "try mixture of depths next" in state
    assert "Budget left: 1 experiment(s)" in state and "of LLM spend" in state and re.search(r"\d+\.\d h", state)
    # the device as the harness read it (a synthetic run has none); what the run printed, as rounded numbers only
    assert "Hardware: unknown device, 140.6 GiB of memory" in state and "H200" not in state
    for key in ("num_steps", "tokens_per_second", "peak_vram_mb", "mfu_percent", "training_seconds"):
        assert f"{key} {said_number(SUMMARY[key])}" in state
    assert "tokens_per_second 218000" in state and "mfu_percent 38.2" in state
    assert "Lesson due: experiment 0059" in state

    # the system prompt states the keep rule as set (defaults: 2 sigma, 2 noise seeds) and the simplify rule
    system = requests[first_request["0060"]].body["system"][0]["text"]
    assert "re-run with 2 other seed(s)" in system and "above 2 sigma" in system and "`simplify`" in system


def test_hypotheses_lessons_notes_and_tools_are_recorded(night):
    workspace, plan, first_request, requests = night
    records = Ledger(workspace.dir).records
    experiments = [r for r in records if r.is_experiment and r.id != "0000"]
    assert all(r.hypothesis and r.expected == "val_bpb -0.003" for r in experiments)
    # every experiment from the second on names the lesson of the one before it
    assert [r.lesson_for for r in experiments[1:]] == [r.id for r in experiments[:-1]]
    proposal = next(e for e in transcript_events(workspace, "0007") if e["type"] == "proposal")
    assert proposal["hypothesis"] == experiments[6].hypothesis and proposal["lesson_for"] == "0006"

    # read_run_log answered with every run of the baseline: its own and the noise floor's re-runs of it
    results = [e for e in transcript_events(workspace, "0020") if e["type"] == "tool_result"]
    logs = results[0]["content"]
    assert [line for line in logs.splitlines() if line.startswith("==")] == [
        "== logs/0000.log ==", "== logs/0000-noise1.log ==", "== logs/0000-noise2.log =="]
    # the last 5 lines of what each printed before it asked for its seal, then the harness's line; the summary
    # printed after the seal is not shown
    assert logs.count("step 00416 (100.0%) | loss") == 3 and "device_memory_mb" not in logs
    assert logs.count("after it asked for its validation seal are not shown to researchers") == 3
    listed = results[1]["content"]
    assert "MATRIX_LR -> 0.05" in listed and "WARMDOWN_RATIO -> 0.6" not in listed  # status keep, text "lr"
    assert "hypothesis: MATRIX_LR is off" in listed

    # a rewrite over the bound is refused with what to do, and the notes are kept as they were
    refused = next(e for e in transcript_events(workspace, "0052") if e["type"] == "tool_result")
    assert refused["is_error"] and "over the limit of 8192" in refused["content"] and "shorter" in refused["content"]
    notes = read_notes(workspace.dir).text
    assert "notes of experiment 50" in notes and "try mixture of depths next" in notes
    assert workspace.is_clean()  # notes.md lives on the ledger side
    kept = [r for r in experiments if r.status == ExperimentStatus.KEEP][-1]
    shown = workspace.repo.git.notes("--ref=refs/notes/research", "show", kept.commit)
    written = max(n for n in (10, 30, 50) if n <= int(kept.id))
    assert f"notes of experiment {written}:" in shown  # recorded with the keep, as they were then

    status = subprocess.run([sys.executable, "-m", "agent.cli", "status", "--tag", workspace.tag, "--workspaces",
                             str(workspace.dir.parent)], capture_output=True, text=True, cwd=ROOT,
                            env={**os.environ, "COLUMNS": "250"})
    assert "hypothesis: FINAL_LR_FRAC is off for this model size" in status.stdout, status.stdout
    assert f"lesson: lesson {experiments[-2].id}:" in status.stdout


def test_touched_parts_come_from_the_diff_not_the_description():
    diff = ("@@ -45,7 +45,7 @@ X0_LAMBDA_LR = 0.5\n ADAM_BETAS = (0.8, 0.95)\n-MATRIX_LR = 0.04\n+MATRIX_LR = 0.05\n"
            "@@ -130,7 +130,7 @@ class CausalSelfAttention(nn.Module):\n         if ve is not None:\n"
            "-        q = norm(q)\n+        q = norm(q) * 2\n"
            "@@ -600,7 +600,9 @@ def main() -> None:\n     x = 1\n+    y = 2\n"
            " def helper():\n-    return 1\n+    return 2\n")
    assert touched_parts(diff) == ["MATRIX_LR", "class CausalSelfAttention", "def main", "def helper"]


@pytest.mark.parametrize("program", sorted((ROOT / "prompts").glob("*.md")), ids=lambda p: p.stem)
def test_programs_teach_and_agree_with_the_fixed_rules(program):
    text = program.read_text()
    assert "tie is discarded" not in text and "a tie" not in text.lower()  # simplify keeps an equal result
    assert not re.search(r"\d(\.\d+)? ?(sigma|standard errors?)\b", text)  # the settings set these, not a program
    for taught in ("`hypothesis`", "`lesson`", "notes.md", "`simplify`", "bolder change"):
        assert taught in text, taught


def test_notes_are_bounded_and_a_note_that_does_not_fit_is_refused_losing_nothing(tmp_path):
    write_notes(tmp_path, "- open: warm-down\n")
    with pytest.raises(NotesFull, match="over the limit of 8192; nothing was written. Rewrite them shorter"):
        write_notes(tmp_path, "y" * (NOTES_LIMIT + 1))
    assert read_notes(tmp_path).text == "- open: warm-down\n"
    added = append_user_note(tmp_path, "try  mixture of depths\nnext")
    assert added.text.endswith("try mixture of depths next\n") and "(from the user, " in added.text
    write_notes(tmp_path, "z" * (NOTES_LIMIT - 10))
    assert read_notes(tmp_path).nearly_full
    with pytest.raises(NotesFull, match="notes.md is full .* give the note again after the next experiment"):
        append_user_note(tmp_path, "one more idea")
    with pytest.raises(NotesFull, match="at most 1000"):
        append_user_note(tmp_path, "w" * 1001)
    assert read_notes(tmp_path).size == NOTES_LIMIT - 10  # nothing was lost or half-written
