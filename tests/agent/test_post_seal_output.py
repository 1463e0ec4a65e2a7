"""What a run printed after it asked for its validation seal never reaches a proposer (issue: the harness handed
val back). At evaluation the run's own forward is called on the scored rows; a hostile forward prints them, or
raises with them in its message. Through the real loop (LocalRunner, the edit policy), the proposer's tools, the
CLI researcher's reference logs (made by the same tool), the fix prompt's log tail and every reason hold only
what the run printed before its seal and the harness's own words; a person still reads the whole log."""

import re

from agent.llm.types import ToolCall
from agent.loop import LoopSettings, run_loop
from agent.proposers.state.message import header
from agent.proposers.toolbox import ToolBox
from agent.recording.ledger import Ledger
from agent.running.runner import LocalRunner
from tests.helpers.scripted import ScriptedChanges

BUILD = "    model = build_model(config, device, attend)\n"
BEFORE_SEAL = BUILD + '    print("before the seal: visible to the researcher", flush=True)\n'
SOFTCAP = "        logits = LOGIT_SOFTCAP * torch.tanh(logits / LOGIT_SOFTCAP)\n"
ROW = 'bytes(int(t) % 256 for t in idx[0, :24].tolist()).hex()'
PRINTS_ROWS = SOFTCAP + f'        if not self.training:\n            print("VALROW " + {ROW}, flush=True)\n'
RAISES_ROWS = SOFTCAP + f'        if not self.training:\n            raise ValueError("VALROW " + {ROW})\n'
STEPS = "num_steps=step,"
STEPS_CARRY = 'num_steps="VALROW-in-the-summary",'
DEVICE = "device=torch.cuda.get_device_name(device) if on_cuda else device.type"
DEVICE_CARRIES = 'device="VALROW-device"'


def test_what_a_run_printed_after_its_seal_reaches_no_proposer(workspace):
    proposer = ScriptedChanges(
        ("print the rows the forward is shown at evaluation", [(BUILD, BEFORE_SEAL), (SOFTCAP, PRINTS_ROWS),
                                                                (STEPS, STEPS_CARRY), (DEVICE, DEVICE_CARRIES)]),
        ("raise with the rows in the message", [(BUILD, BEFORE_SEAL), (SOFTCAP, RAISES_ROWS)]))
    run_loop(workspace, proposer, LocalRunner(), LoopSettings(max_experiments=3, noise_seeds=0), say=lambda _: None)
    records = Ledger(workspace.dir).records
    baseline, prints, raises = records

    # a person reads everything the runs printed
    printed = (workspace.dir / prints.runs[0].log).read_text()
    assert re.search(r"VALROW [0-9a-f]{48}", printed) and "before the seal: visible" in printed
    assert "VALROW" in (workspace.dir / raises.runs[0].log).read_text()
    assert prints.runs[0].log_shown_bytes < len(printed.encode())
    assert prints.runs[0].seal_seconds is not None and raises.runs[0].seal_seconds is not None  # both sealed
    assert prints.summary["num_steps"] == "VALROW-in-the-summary" and prints.summary["device"] == "VALROW-device"
    assert raises.runs[0].log_shown_bytes < len((workspace.dir / raises.runs[0].log).read_bytes())

    # the proposer's tool (the CLI researcher's reference/logs/ID.log is this tool's answer)
    tools = ToolBox(workspace.dir, {}, records)
    for record in (prints, raises):
        shown = tools.run(ToolCall("c", "read_run_log", {"experiment_id": record.id, "tail_lines": 400})).content
        assert "before the seal: visible to the researcher" in shown, shown[-2000:]
        assert "VALROW" not in shown and "after it asked for its validation seal are not shown" in shown
        listed = tools.run(ToolCall("l", "list_experiments", {})).content
        assert "VALROW" not in listed

    # what the next proposals and a fix are told: the crash's tail, every reason, the best's summary
    for record in records:
        assert "VALROW" not in record.log_tail and "VALROW" not in record.reason, record.reason
        assert all("VALROW" not in (attempt.reason + attempt.log) for attempt in record.fix_attempts)
    context = type("Context", (), {"track": workspace.track, "best": prints, "history": records,
                                   "facts": type("Facts", (), {"budget_line": staticmethod(lambda: "")})()})
    assert "VALROW" not in header(context)
