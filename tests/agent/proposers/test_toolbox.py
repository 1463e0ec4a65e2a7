"""The read-only tools' answers: the history table, files, logs and diffs, bounded; bad calls are tool errors."""

from typing import get_args

from agent.llm.tools import ListExperimentsArgs
from agent.llm.types import ToolCall
from agent.proposers.toolbox import ToolBox, bounded, history_table
from agent.recording.record import SIMPLIFY, Evidence, ExperimentRecord, ExperimentStatus, RunEntry

RECORDS = [
    ExperimentRecord(id="0000", status="keep", triage="ok", val_bpb=2.5, description="baseline", log="logs/0000.log",
                     runs=[RunEntry(seed=42, val_bpb=2.5, log="logs/0000.log", log_shown_bytes=10 ** 6)]),
    ExperimentRecord(id="0000-noise", status="noise", triage="ok", val_bpb=2.51, sigma=0.01, description="noise floor",
                     runs=[RunEntry(seed=43, val_bpb=2.52), RunEntry(seed=44, val_bpb=2.5)]),
    ExperimentRecord(id="0001", status="keep", triage="ok", val_bpb=2.47, description="LR 0.04 -> 0.05",
                     runs=[RunEntry(seed=45, val_bpb=2.48), RunEntry(seed=46, val_bpb=2.46)], diff="-LR\n+LR\n"),
    ExperimentRecord(id="0002", status="crash", triage="oom", description="DEPTH 8 -> 32"),
]


def test_the_history_table_marks_the_best_and_gives_standard_errors_once_sigma_is_known():
    rows = history_table(RECORDS).splitlines()
    assert rows[0].startswith("sigma of val_bpb between seeds: 0.010000")
    assert rows[2].startswith("0000        keep         2.500000  0.010000     1  ok")
    assert rows[4].startswith("0001      * keep         2.470000  0.007071     2  ok")
    assert rows[4].endswith("LR 0.04 -> 0.05 (confirmed by a re-run)")
    assert rows[5].startswith("0002        crash           -         -         1  oom")
    assert history_table(RECORDS[:1]).splitlines()[0].startswith("id ")  # no sigma yet: no sigma line
    assert len(history_table(RECORDS, limit=2).splitlines()) == 1 + 1 + 2


def call(name, **arguments):
    return ToolCall(id="c1", name=name, arguments=arguments)


def test_answers_and_errors(tmp_path):
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "0000.log").write_text("".join(f"step {i}\n" for i in range(100)))
    box = ToolBox(tmp_path, {"train.py": "DEPTH = 4\n"}, RECORDS)
    assert box.run(call("read_file", path="train.py")).content == "DEPTH = 4\n"
    assert box.run(call("read_run_log", experiment_id="0000", tail_lines=2)).content == \
        "== logs/0000.log ==\nstep 98\nstep 99"
    assert box.run(call("show_diff", experiment_id=" 0001 ")).content == "-LR\n+LR\n"
    assert box.run(call("show_diff", experiment_id="0000")).content == "(no change: the baseline)"
    missing = box.run(call("read_file", path="prepare.py"))
    assert missing.is_error and "'prepare.py' cannot be read" in missing.content
    unknown = box.run(call("show_diff", experiment_id="0042"))
    assert unknown.is_error and "no experiment '0042': ids are 0000, 0000-noise, 0001, 0002" in unknown.content
    never_ran = box.run(call("read_run_log", experiment_id="0002"))
    assert never_ran.is_error and "has no log" in never_ran.content
    too_many = box.run(call("list_experiments", limit=501))
    assert too_many.is_error and "limit: Input should be less than or equal to 500" in too_many.content
    submit = box.run(call("submit_experiment", description="x", hypothesis="h", expected="e",
                          edits=[{"old_string": "a", "new_string": "b"}]))
    assert submit.is_error and "submit_experiment is not a read-only tool" in submit.content


def test_long_tool_output_keeps_head_and_tail():
    text = "".join(f"line {i}\n" for i in range(10_000))
    cut = bounded(text, 1000)
    assert cut.startswith("line 0\n") and cut.endswith("line 9999\n") and len(cut) < 1200
    assert "characters cut here" in cut and bounded("short", 1000) == "short"


def test_list_experiments_filters_and_shows_the_reasoning(tmp_path):
    records = [*RECORDS[:3],
               ExperimentRecord(id="0002", status="discard", triage="ok", val_bpb=2.48, description="warm-down 0.3",
                                hypothesis="a shorter warm-down leaves more steps at the peak rate",
                                expected="val_bpb -0.002", lesson="LR 0.05 held up under a re-run",
                                lesson_for="0001"),
               ExperimentRecord(id="0003", status="keep", triage="ok", val_bpb=2.47, description="drop the gc tuning",
                                evidence=Evidence(kept_as="simplify"), lesson="the warm-down is not the limit",
                                lesson_for="0002")]
    box = ToolBox(tmp_path, {}, records)
    simplified = box.run(call("list_experiments", status="simplify")).content.splitlines()
    assert [row[:4] for row in simplified[2:]] == ["0003"] and "simplify" in simplified[2]
    kept = box.run(call("list_experiments", status="keep", from_id="0001")).content.splitlines()
    table = kept[: kept.index("")]  # the reasoning of the listed rows follows after a blank line
    assert [row[:4] for row in table[2:]] == ["0001", "0003"]
    by_text = box.run(call("list_experiments", text="WARM-DOWN", to_id="0002")).content
    assert "warm-down 0.3" in by_text and "drop the gc" not in by_text
    assert ("0002: hypothesis: a shorter warm-down leaves more steps at the peak rate | expected: val_bpb -0.002 | "
            "lesson: the warm-down is not the limit") in by_text  # the lesson a later proposal drew, beside it
    assert box.run(call("list_experiments", status="crash")).content == "no experiment matches these filters"


def test_read_run_log_gives_every_run_of_an_experiment_and_write_notes_is_bounded(tmp_path):
    (tmp_path / "logs").mkdir()
    for name in ("0001", "0001.rerun1", "0001-noise1"):
        (tmp_path / "logs" / f"{name}.log").write_text(f"run {name}\nval_bpb: 2.4\n")
    before_seal = len("run 0001\n")  # each run asked for its seal after its first line
    records = [RECORDS[0],
               ExperimentRecord(id="0001", status="keep", runs=[
                   RunEntry(log="logs/0001.log", log_shown_bytes=before_seal),
                   RunEntry(log="logs/0001.rerun1.log", log_shown_bytes=before_seal + 7)]),
               ExperimentRecord(id="0001-noise", status="noise", of="0001",
                                runs=[RunEntry(log="logs/0001-noise1.log")])]
    box = ToolBox(tmp_path, {}, records)
    logs = box.run(call("read_run_log", experiment_id="0001", tail_lines=1)).content
    after = ("[harness] {} more bytes the run printed after it asked for its validation seal are not shown to "
             "researchers; its result is what the harness parsed (list_experiments)")
    assert logs == ("== logs/0001.log ==\nrun 0001\n" + after.format(13) + "\n\n== logs/0001.rerun1.log ==\n"
                    "run 0001.rerun1\n" + after.format(13) + "\n\n== logs/0001-noise1.log ==\n[harness] this log is "
                    "not shown: its run ended before the harness marked where a run asks for its validation seal")
    written = box.run(call("write_notes", text="- open: warm-down\n"))
    assert not written.is_error and (tmp_path / "notes.md").read_text() == "- open: warm-down\n"
    refused = box.run(call("write_notes", text="x" * 9000))
    assert refused.is_error and "over the limit of 8192" in refused.content
    assert (tmp_path / "notes.md").read_text() == "- open: warm-down\n"


def test_list_experiments_filters_on_every_status_the_ledger_records(tmp_path):
    offered = set(get_args(get_args(ListExperimentsArgs.model_fields["status"].annotation)[0]))
    in_the_ledger = {status.value for status in ExperimentStatus} - {"pending"}  # pending: a draft's, never recorded
    assert offered == in_the_ledger | {SIMPLIFY}
    superseded = ExperimentRecord(id="0003", status="superseded", triage="ok", val_bpb=2.46, description="WD 0 -> 0.1")
    shown = ToolBox(tmp_path, {"train.py": ""}, [*RECORDS, superseded]).run(call("list_experiments",
                                                                                 status="superseded"))
    assert not shown.is_error and "WD 0 -> 0.1" in shown.content and "LR 0.04" not in shown.content
