"""Several proposals at once, through the real loop and the real LLM proposer against the loopback server:
conversations overlap, no two run the same change, a rate limit met by one slows all of them once, and the
notes and lessons they write are never lost to one another."""

import itertools
import json
import threading

from agent.llm.pricing import PriceTable
from agent.llm.select import conversation_factory
from agent.llm.types import Usage
from agent.loop import LoopSettings, run_loop
from agent.proposers.llm import LLMProposer
from agent.proposers.optuna_search import OptunaProposer
from agent.proposers.proposing import normalised
from agent.recording.ledger import Ledger
from agent.recording.notes import read_notes
from agent.running.runner import LocalRunner
from agent.steps.conversations import conversations_needed
from tests.helpers.llm_responders import SettingChanges, tool_results
from tests.helpers.llm_server import LLMServer, tool_call
from tests.helpers.synthetic_runner import SyntheticRunner

MODEL = "anthropic:claude-opus-5-5"


def proposer_for(workspace, server, monkeypatch) -> LLMProposer:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", server.anthropic_base_url())
    return LLMProposer(conversation_factory(MODEL), workspace.dir, PriceTable(), retry_base_s=0.2,
                       outage_window_s=30)


def transcript(workspace, experiment_id):
    path = workspace.dir / "transcripts" / f"{experiment_id}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def changed_lines(workspace, record) -> set[str]:
    before = workspace.file_at("train.py", record.parent).splitlines()
    after = workspace.file_at("train.py", record.commit).splitlines()
    return {normalised(line) for line in set(after) - set(before)}


def test_conversations_needed_follows_the_measured_times():
    assert conversations_needed(8, [], [300.0]) == 1                     # nothing measured yet
    assert conversations_needed(8, [0.01] * 3, [20.0] * 3) == 1          # a proposer that answers at once
    assert conversations_needed(8, [4.0] * 3, [20.0] * 3) == 2           # 8 x 4 / 20 x 1.25
    assert conversations_needed(64, [4.0] * 3, [20.0] * 3) == 16
    assert conversations_needed(16, [60.0] * 3, [300.0] * 3) == 4
    assert conversations_needed(4, [100.0] * 3, [20.0] * 3) == 4         # never more than the slots


def test_two_conversations_never_run_the_same_change(workspace, monkeypatch):
    model = SettingChanges(seed=1, first=("WARMDOWN_RATIO", 0.3))  # every conversation reaches for this one first
    with LLMServer(latency=0.5, responder=model) as server:
        proposer = proposer_for(workspace, server, monkeypatch)
        runner = SyntheticRunner({"WARMDOWN_RATIO = 0.3": 0.01}, slots=3, delays={"": 2.0})
        run_loop(workspace, proposer, runner, LoopSettings(max_experiments=5, noise_seeds=0, proposers=3),
                 say=lambda _: None)
        assert server.most_at_once >= 2  # the conversations did overlap
    records = [r for r in Ledger(workspace.dir).records if r.id != "0000"]
    assert len(records) == 4
    changes = [frozenset(changed_lines(workspace, r)) for r in records]
    assert all(changes)
    tried = {}
    for record, change in zip(records, changes, strict=True):
        assert (record.parent, change) not in tried, f"{record.id} ran the change of {tried[(record.parent, change)]}"
        tried[(record.parent, change)] = record.id
    assert sum("WARMDOWN_RATIO = 0.3" in line for change in changes for line in change) == 1
    refusals = [e for r in records for e in transcript(workspace, r.id)
                if e["type"] == "tool_result" and e["is_error"] and "makes this same change" in e["content"]
                or e["type"] == "tool_result" and "already tried this same change" in e["content"]]
    assert len(refusals) >= 1
    assert model.submitted.count("WARMDOWN_RATIO 0.5 -> 0.3") >= 2  # the others did ask for it, and were told no
    lessons = [r.lesson_for for r in records if r.lesson_for]
    assert len(lessons) == len(set(lessons))  # a lesson is asked of one conversation only


class BurstOnce:
    """SettingChanges, three calls a proposal, and a rate limit on the key from the `at`-th request on."""

    def __init__(self, server_box, at: int, seconds: float):
        self.model, self.box, self.at, self.seconds = SettingChanges(seed=2, calls=3), server_box, at, seconds
        self.count, self._lock = 0, threading.Lock()

    def __call__(self, api, body):
        with self._lock:
            self.count += 1
            burst = self.count == self.at
        if burst:
            self.box[0].rate_limit(self.seconds)
            return tool_call("read_file", {"path": "train.py"})  # answered; the next requests meet the limit
        return self.model(api, body)


def test_a_rate_limit_met_by_one_conversation_slows_all_of_them_once(workspace, monkeypatch):
    box = []
    responder = BurstOnce(box, at=6, seconds=1.5)
    with LLMServer(latency=0.3, responder=responder) as server:
        box.append(server)
        proposer = proposer_for(workspace, server, monkeypatch)
        runner = SyntheticRunner({}, slots=4, delays={"": 3.0})
        run_loop(workspace, proposer, runner, LoopSettings(max_experiments=5, noise_seeds=0, proposers=4),
                 say=lambda _: None)
        refused = [r for r in server.requests if r.status == 429]
        assert server.most_at_once >= 3
    # Four conversations were talking when the limit came; one met it, and the others waited for its reset
    # instead of each meeting it (and each backing off on its own).
    assert 1 <= len(refused) <= 2, [r.status for r in server.requests]
    assert proposer.limits.pauses >= 1 and proposer.limits.waits >= 2
    records = [r for r in Ledger(workspace.dir).records if r.id != "0000"]
    assert len(records) == 4 and all(r.status.value in ("keep", "discard") for r in records)


class NotesWriters:
    """Every conversation adds a finding of its own to the notes as it read them, then submits; told that the
    notes changed meanwhile, it adds its finding to them as they are now."""

    def __init__(self):
        self.model, self.findings = SettingChanges(seed=3), itertools.count(1)

    def __call__(self, api, body):
        results = tool_results(body)
        changed = results and results[-1]["is_error"] and "changed since you read it" in str(results[-1]["content"])
        if results and not changed:
            return self.model(api, body)
        current = str(results[-1]["content"]).split("It now reads:\n", 1)[1].split("\nCall write_notes")[0] \
            if changed else ""
        current = "" if current == "(empty)" else current
        mine = f"- finding {next(self.findings)}"
        return tool_call("write_notes", {"text": f"{current}\n{mine}" if current else mine})


def test_notes_written_by_conversations_at_once_are_merged_not_overwritten(workspace, monkeypatch):
    with LLMServer(latency=0.4, responder=NotesWriters()) as server:
        proposer = proposer_for(workspace, server, monkeypatch)
        runner = SyntheticRunner({}, slots=3, delays={"": 2.0})
        run_loop(workspace, proposer, runner, LoopSettings(max_experiments=4, noise_seeds=0, proposers=3),
                 say=lambda _: None)
    records = [r for r in Ledger(workspace.dir).records if r.id != "0000"]
    written = [e for r in records for e in transcript(workspace, r.id)
               if e["type"] == "tool_result" and e["name"] == "write_notes" and not e["is_error"]]
    assert len(written) == 3
    notes = read_notes(workspace.dir).text
    assert notes.count("- finding ") == 3, notes


def test_eight_slots_of_real_training_propose_several_at_once(workspace, monkeypatch):
    """K = 8 on the local runner (real training, test track) and proposals of ~2 s: the loop opens more than one
    conversation at once by itself (no --proposers)."""
    model = SettingChanges(seed=4)
    with LLMServer(latency=2.0, responder=model) as server:
        proposer = proposer_for(workspace, server, monkeypatch)
        run_loop(workspace, proposer, LocalRunner(slots=8),
                 LoopSettings(max_experiments=5, noise_seeds=0, parallel=8), say=lambda _: None)
        assert server.most_at_once >= 2
    # Every experiment is recorded once. (On a 24 GiB machine eight runs get 2.4 GiB of address space each, which
    # some test-track runs outgrow: those are recorded as out-of-memory crashes of their own.)
    records = Ledger(workspace.dir).records
    assert sorted(r.id for r in records) == [f"{n:04d}" for n in range(5)]
    assert records[0].val_bpb is not None
    assert all(r.status.value in ("keep", "discard", "crash", "superseded") for r in records), [
        (r.id, r.status.value, r.reason) for r in records]


class LongAndShort:
    """Experiment 0001's conversation submits at once; every other one reads train.py `reads` times first."""

    def __init__(self, reads: int, usage: tuple[int, int]):
        self.reads, self.usage, self.model = reads, usage, SettingChanges(seed=5)

    def __call__(self, api, body):
        quick = "Propose experiment 0001" in json.dumps(body["messages"][0])
        if not quick and len(tool_results(body)) < self.reads:
            return tool_call("read_file", {"path": "train.py"}, usage=self.usage)
        submitted = self.model(api, body)
        return tool_call("submit_experiment", submitted.calls[0][1], usage=self.usage)


def test_the_cost_cap_counts_what_open_conversations_have_spent(workspace, monkeypatch):
    usage = (100_000, 1_000)
    per_call = PriceTable().cost(MODEL.split(":")[1], Usage(input_tokens=usage[0], output_tokens=usage[1], calls=1))
    assert per_call > 0
    with LLMServer(latency=0.3, responder=LongAndShort(reads=10, usage=usage)) as server:
        proposer = proposer_for(workspace, server, monkeypatch)
        runner = SyntheticRunner({}, slots=2, delays={"": 1.0})
        why = run_loop(workspace, proposer, runner,
                       LoopSettings(max_experiments=6, noise_seeds=0, proposers=2, overlap=False,
                                    max_cost_usd=3.5 * per_call), say=lambda _: None)
    # When 0001 ended, 0002's conversation was still talking and had spent more than the cap left: no third
    # experiment was started, though nothing but 0001's single call had been recorded by then.
    assert "cost cap" in why
    assert [r.id for r in Ledger(workspace.dir).records] == ["0000", "0001", "0002"]
    assert not (workspace.dir / "transcripts" / "0003.jsonl").exists()


def test_optuna_asked_from_several_conversations_keeps_its_trials_apart(workspace):
    proposer = OptunaProposer(workspace.dir / "optuna.journal", seed=3)
    runner = SyntheticRunner({}, slots=3, delays={"": 0.5})
    run_loop(workspace, proposer, runner, LoopSettings(max_experiments=10, noise_seeds=0, proposers=3),
             say=lambda _: None)
    records = [r for r in Ledger(workspace.dir).records if r.id != "0000"]
    # a keep (seeds are drawn at random, so some nights have one) starts a new best's study, numbered from 0
    trials = [(r.proposal["study"], r.proposal["trial"]) for r in records]
    assert len(records) == 9 and len(set(trials)) == 9
    assert proposer.study.sampler._constant_liar  # trials still training count, as Optuna advises for parallel ones
    told = {(study.study_name, t.number): t.state.name for study in proposer._studies.values() for t in study.trials}
    assert all(told[trial] in ("COMPLETE", "FAIL") for trial in trials)
