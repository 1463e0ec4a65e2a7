"""LocalRunner with hostile train.py variants: kills, secrets, tamper, triage."""

import re
import signal
import textwrap
import threading
import time

import pytest

from agent.running.runner import LocalRunner
from tests.helpers.jobs import job
from tests.helpers.processes import alive, processes_under
from trainer.runs.triage import Triage
from trainer.sandbox.untrusted import isolation


def run_script(workspace, body, timeout=60.0, experiment_id="0001"):
    commit = workspace.commit_train(textwrap.dedent(body), "hostile variant")
    return LocalRunner().run(workspace, job(commit, experiment_id, timeout))


def pids_in(log_path):
    return [int(p) for p in re.findall(r"pid (\d+)", log_path.read_text())]


SLEEPER = """
import os, subprocess, sys, time
print("pid", os.getpid(), flush=True)
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(1000)"])
print("pid", child.pid, flush=True)
escaped = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(1000)"], start_new_session=True)
print("pid", escaped.pid, flush=True)
time.sleep(1000)
"""


def test_timeout_kills_the_run_its_children_and_escaped_grandchildren(workspace):
    result = run_script(workspace, SLEEPER, timeout=3)
    assert result.timed_out and result.verdict.triage == Triage.TIMEOUT
    pids = pids_in(result.log_path)  # in the run's own pid namespace where it is isolated
    assert len(pids) == 3
    assert processes_under(workspace.runs_dir) == []
    assert isolation().available or [pid for pid in pids if alive(pid)] == []
    assert "killed at the hard timeout" in result.log_path.read_text()
    assert not (workspace.runs_dir / "0001").exists()


def test_environment_holds_no_secrets(workspace, monkeypatch):
    secrets = {"ANTHROPIC_API_KEY": "sk-ant-test-1", "OPENAI_API_KEY": "sk-test-2", "HF_TOKEN": "hf_test3",
               "AWS_SECRET_ACCESS_KEY": "aws-test-4", "MY_SERVICE_PASSWORD": "hunter2-test5",
               "GITHUB_TOKEN": "ghp_test6"}
    for name, value in secrets.items():
        monkeypatch.setenv(name, value)
    result = run_script(workspace, "import os\nfor k, v in sorted(os.environ.items()):\n    print(k, '=', v)\n")
    log = result.log_path.read_text()
    assert "PATH =" in log and "AUTORESEARCH_CACHE =" in log
    for name, value in secrets.items():
        assert name not in log and value not in log


@pytest.mark.parametrize("body, triage, reason", [
    ("raise NameError('name DEPTH_X is not defined')\n", Triage.FIXABLE, "NameError: name DEPTH_X is not defined"),
    ("print('FAIL: training diverged at step 3: loss nan'); raise SystemExit(1)\n", Triage.DIVERGED,
     "training diverged at step 3"),
    ("print('---'); print('val_bpb: 0.000100')\nopen('prepare.py', 'a').write('# changed')\n", Triage.TAMPER,
     "prepare.py"),
    ("print('---'); print('val_bpb: 0.500000')\nimport json; json.dump({}, open('track.json', 'w'))\n",
     Triage.TAMPER, "track.json"),
    ("print('training done, but no summary')\n", Triage.TAMPER, "without a val_bpb"),
])
def test_triage_of_real_runs(workspace, body, triage, reason):
    result = run_script(workspace, body)
    if triage == Triage.TAMPER and "open(" in body and isolation().available:
        # The run is a stranger to its frozen files: it cannot write them at all.
        triage, reason = Triage.FIXABLE, "PermissionError"
    assert result.verdict.triage == triage, result.log_path.read_text()
    assert reason in result.verdict.reason


def test_missing_data_is_infra(workspace, tmp_path, monkeypatch):
    monkeypatch.setenv("AUTORESEARCH_CACHE", str(tmp_path / "empty-cache"))
    result = LocalRunner().run(workspace, job(workspace.head(), "0000", 60))
    assert result.returncode != 0
    assert result.verdict.triage == Triage.INFRA, result.tail
    assert "is not prepared in" in result.verdict.reason


def test_ctrl_c_while_running_leaves_no_process(workspace):
    commit = workspace.commit_train(textwrap.dedent(SLEEPER), "sleeper")
    previous = signal.signal(signal.SIGALRM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    signal.setitimer(signal.ITIMER_REAL, 2.0)
    try:
        with pytest.raises(KeyboardInterrupt):
            LocalRunner().run(workspace, job(commit, "0002", 60))
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    pids = pids_in(workspace.dir / "logs" / "0002.log")
    assert len(pids) == 3 and processes_under(workspace.runs_dir) == []
    assert isolation().available or [pid for pid in pids if alive(pid)] == []


def test_the_compile_cache_is_the_runs_own(workspace):
    """What a run leaves in its compile cache (a stash of weights, of val, of code) is gone for the next run."""
    body = textwrap.dedent("""
    import os
    cache = os.environ["TORCHINDUCTOR_CACHE_DIR"]
    print("found:", sorted(os.listdir(cache)))
    with open(cache + "/stash.bin", "w") as stash:
        stash.write("left for the next run")
    print("---")
    print("val_bpb: 1.000000")
    """)
    commit = workspace.commit_train(body, "leaves a stash in the compile cache")
    runner = LocalRunner()
    first, second = runner.run(workspace, job(commit, "0001", 60)), runner.run(workspace, job(commit, "0002", 60))
    for result in (first, second):
        assert result.verdict.triage == Triage.OK, result.tail
        assert "found: []" in result.log_path.read_text(), result.tail
    assert not any(workspace.runs_dir.iterdir())


def test_one_gpu_per_slot_and_cancel_all_stops_every_run(workspace, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5")
    runner = LocalRunner()
    assert runner.gpus == [3, 5] and runner.slots == 2
    with pytest.raises(ValueError, match="one run per GPU"):
        LocalRunner(slots=3)
    waits = 'import os, time\nprint("gpu", os.environ.get("CUDA_VISIBLE_DEVICES"), flush=True)\ntime.sleep(1000)\n'
    commit = workspace.commit_train(waits, "prints its GPU, then waits")
    results = {}
    threads = [threading.Thread(target=lambda name=name: results.update({name: runner.run(workspace,
                                                                                            job(commit, name, 300))}))
               for name in ("0001", "0002")]
    for thread in threads:
        thread.start()
    logs = [workspace.dir / "logs" / f"{name}.log" for name in ("0001", "0002")]
    deadline = time.monotonic() + 120
    while not all(log.exists() and "gpu" in log.read_text() for log in logs):
        assert time.monotonic() < deadline, "the two runs never started together"
        time.sleep(0.1)
    started = time.monotonic()
    runner.cancel_all()
    for thread in threads:
        thread.join(timeout=60)
    assert time.monotonic() - started < 30
    assert sorted(r.where for r in results.values()) == ["local slot 1, GPU 3", "local slot 2, GPU 5"]
    assert sorted(re.search(r"gpu (\S+)", log.read_text()).group(1) for log in logs) == ["3", "5"]
    assert processes_under(workspace.runs_dir) == []
