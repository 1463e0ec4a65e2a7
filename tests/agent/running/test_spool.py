"""The spool runner and the trainer worker as separate processes, on the test track; and the
security-relevant settings of the docker deployment."""

import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
import yaml

from agent.judging.confirm import confirm
from agent.loop import LoopSettings, run_loop
from agent.proposers.optuna_search import OptunaProposer
from agent.recording.ledger import Ledger
from agent.running.spool_runner import SpoolRunner
from tests.helpers import jobs
from tests.helpers.processes import processes_under
from trainer.remote import spool as spoolfs
from trainer.remote.spool import SpoolJob, SpoolResult
from trainer.runs.jobs import Job
from trainer.runs.run_id import RunId
from trainer.runs.triage import Triage
from trainer.sandbox.untrusted import isolation_available

ROOT = Path(__file__).resolve().parents[3]
ISOLATED = isolation_available()
needs_isolation = pytest.mark.skipif(not ISOLATED, reason="needs bubblewrap that can make namespaces")


class Workers:
    """Trainer workers started as real processes; all stopped at the end."""

    def __init__(self, spool: Path, scratch: Path, cache: Path):
        self.spool, self.scratch, self.cache = spool, scratch, cache
        self.processes: dict[str, subprocess.Popen] = {}

    def start(self, name: str, **env) -> subprocess.Popen:
        environment = dict(os.environ, AUTORESEARCH_CACHE=str(self.cache), **env)
        self.scratch.mkdir(parents=True, exist_ok=True)
        with open(self.said(name), "wb") as said:
            process = subprocess.Popen([sys.executable, "-m", "trainer.remote.worker", "--spool", str(self.spool),
                                        "--name", name, "--scratch", str(self.scratch / name)],
                                       env=environment, cwd=ROOT,
                                       stdout=said, stderr=subprocess.DEVNULL)
        self.processes[name] = process
        deadline = time.monotonic() + 30
        while not any(w.worker == name for w in spoolfs.alive_workers(self.spool)):
            assert time.monotonic() < deadline, f"worker {name} never sent a heartbeat"
            time.sleep(0.1)
        return process

    def said(self, name: str) -> Path:
        """What worker `name` printed: a line per job it started."""
        return self.scratch / f"{name}.out"

    def stop_all(self):
        for process in self.processes.values():
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in self.processes.values():
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()


@pytest.fixture
def workers(tmp_path, test_track):
    pool = Workers(spoolfs.layout(tmp_path / "spool"), tmp_path / "scratch", test_track.directory.parent)
    yield pool
    pool.stop_all()


def run_job(workers, workspace, body: str, timeout=60.0) -> dict:
    commit = workspace.commit_train(textwrap.dedent(body), "variant")
    return SpoolRunner(workers.spool, dead_after=10).run(workspace, jobs.job(commit, "0001", timeout))


def test_loop_through_the_spool(workspace, workers):
    workers.start("w1")
    run_loop(workspace, OptunaProposer(workspace.dir / "optuna.journal"), SpoolRunner(workers.spool),
             LoopSettings(max_experiments=2, noise_seeds=0), say=lambda _: None)
    records = Ledger(workspace.dir).records
    # The saved weights travel back through the spool, and the worker scores them with the evaluator.
    assert records[0].checkpoint == "checkpoints/0000.pt" and (workspace.dir / "checkpoints/0000.pt").is_file()
    confirmed = confirm(workspace, SpoolRunner(workers.spool))
    assert confirmed.baseline.val == pytest.approx(records[0].val_bpb, abs=1e-6)
    assert (workspace.dir / "logs" / "confirm-0000.log").read_text().count("evaluator: done") == 1
    assert [r.triage for r in records] == ["ok", "ok"] and records[0].status == "keep"
    assert "val_bpb:" in (workspace.dir / records[1].log).read_text()
    assert sorted(p.name for p in (workers.spool / "results").iterdir()) and not list(
        (workers.spool / "claimed").iterdir()) and not list((workers.spool / "jobs").iterdir())


def test_a_worker_killed_mid_run_is_infra_and_the_run_is_retried_elsewhere(workspace, workers):
    first = workers.start("w1")
    runner = SpoolRunner(workers.spool, dead_after=8)
    thread = threading.Thread(target=lambda: run_loop(workspace, OptunaProposer(workspace.dir / "optuna.journal"),
                                                      runner, LoopSettings(max_experiments=1), say=lambda _: None))
    thread.start()
    deadline = time.monotonic() + 60
    while not any("step 0000" in p.read_text() for p in (workers.spool / "logs").glob("*.log")):
        assert time.monotonic() < deadline, "the job never started training"
        time.sleep(0.1)
    first.kill()
    first.wait()
    workers.start("w2")
    thread.join(timeout=120)
    assert not thread.is_alive()
    record = Ledger(workspace.dir).records[0]
    assert record.status == "keep" and record.triage == "ok"
    assert "trainer worker w1 stopped answering during the run" in (workspace.dir / "logs" / "0000.log").read_text()
    events = (workspace.dir / "transcripts" / "0000.jsonl").read_text()
    assert '"type": "retry"' in events
    assert processes_under(workers.scratch / "w1") == []


def test_two_workers_never_run_the_same_job(workspace, workers):
    body = """
    print("---")
    print("val_bpb: 1.000000")
    """
    commit = workspace.commit_train(textwrap.dedent(body), "prints a result")
    jobs = [f"job{i}" for i in range(8)]
    for job in jobs:
        spoolfs.submit(workers.spool, SpoolJob(id=job, workspace=workspace.dir, frozen=workspace.frozen_hashes(),
                                               job=Job(run=RunId.train(job), commit=commit, timeout=30)))
    workers.start("w1")
    workers.start("w2")
    deadline = time.monotonic() + 90
    while len(list((workers.spool / "results").glob("*.json"))) < len(jobs):
        assert time.monotonic() < deadline, "jobs left unfinished"
        time.sleep(0.2)
    started = [line.split()[-1] for name in ("w1", "w2") for line in workers.said(name).read_text().splitlines()
               if line.startswith(f"worker {name}: train ")]
    assert sorted(started) == sorted(jobs)
    results = [spoolfs.read_message(workers.spool / "results" / f"{job}.json", SpoolResult) for job in jobs]
    assert {r.worker for r in results} <= {"w1", "w2"} and all(r.run.returncode == 0 for r in results)
    assert all(r.run.verdict.triage == Triage.OK and r.run.isolated == ISOLATED for r in results)


def test_a_timed_out_job_leaves_no_process(workspace, workers):
    workers.start("w1")
    result = run_job(workers, workspace, """
    import subprocess, sys, time
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(1000)"], start_new_session=True)
    time.sleep(1000)
    """, timeout=3)
    assert result.verdict.triage == Triage.TIMEOUT
    time.sleep(0.5)
    assert processes_under(workers.scratch) == []


def test_the_run_sees_no_api_keys(workspace, workers):
    workers.start("w1", ANTHROPIC_API_KEY="sk-ant-worker-secret", OPENAI_API_KEY="sk-worker-secret")
    result = run_job(workers, workspace, "import os\nprint(sorted(os.environ), os.environ.get('ANTHROPIC_API_KEY'))\n")
    log = result.log_path.read_text()
    assert "AUTORESEARCH_CACHE" in log and "API_KEY" not in log and "secret" not in log
    assert result.where == "spool worker w1"


def test_cancel_all_withdraws_a_waiting_job_and_kills_a_running_one(workspace, workers):
    workers.start("w1")
    runner = SpoolRunner(workers.spool)
    assert runner.slots == 1
    commit = workspace.commit_train("import time\nprint('step 0000', flush=True)\ntime.sleep(1000)\n", "sleeps")
    results = {}
    threads = [threading.Thread(target=lambda n=name: results.update({n: runner.run(workspace,
                                                                                    jobs.job(commit, n, 120))}))
               for name in ("0001", "0002")]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 60
    while not (list((workers.spool / "claimed").glob("*.json")) and list((workers.spool / "jobs").glob("*.json"))
               and any("step 0000" in p.read_text() for p in (workers.spool / "logs").glob("*.log"))):
        assert time.monotonic() < deadline, "one job never started while the other waited"
        time.sleep(0.1)
    cancelled = time.monotonic()
    runner.cancel_all()
    for thread in threads:
        thread.join(30)
    assert time.monotonic() - cancelled < 20 and set(results) == {"0001", "0002"}
    for result in results.values():
        assert result.verdict.triage == Triage.INFRA and "cancelled" in result.verdict.reason
    assert [r.where for r in results.values()].count("spool worker w1") == 1  # the one that ran
    assert not list((workers.spool / "jobs").iterdir()) and processes_under(workers.scratch) == []
    late = runner.run(workspace, jobs.job(commit, "0003", 120))
    assert late.verdict.triage == Triage.INFRA and "not submitted" in late.verdict.reason


@needs_isolation
def test_frozen_files_and_the_data_cache_are_read_only(workspace, workers, test_track):
    workers.start("w1")
    data_file = next((test_track.directory / "train").glob("*.parquet"))
    result = run_job(workers, workspace, f"""
    for path in ("prepare.py", "track.json", {str(data_file)!r}):
        try:
            open(path, "a").write("# tampered")
            print("WROTE", path)
        except OSError as err:
            print("REFUSED", path, err)
    """)
    log = result.log_path.read_text()
    assert "WROTE" not in log and log.count("REFUSED") == 3  # the stranger owns none of them, nor can it write
    assert result.frozen_changed == []


@needs_isolation
def test_the_run_has_no_network(workspace, workers):
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    port = listener.getsockname()[1]
    workers.start("w1")
    result = run_job(workers, workspace, f"""
    import socket
    try:
        socket.create_connection(("127.0.0.1", {port}), timeout=3)
        print("CONNECTED")
    except OSError as err:
        print("NO NETWORK", err)
    """)
    listener.close()
    log = result.log_path.read_text()
    assert "NO NETWORK" in log and "CONNECTED" not in log


def test_no_worker_alive_is_infra(workspace, tmp_path):
    runner = SpoolRunner(spoolfs.layout(tmp_path / "empty-spool"), dead_after=1)
    assert runner.slots == 1  # none alive: still one, so that a loop waits and then says why
    result = runner.run(workspace, jobs.job(workspace.head(), "0000", 30))
    assert result.verdict.triage == Triage.INFRA and "no trainer worker is alive" in result.verdict.reason
    assert not list((tmp_path / "empty-spool" / "jobs").iterdir())


def test_a_result_the_agent_cannot_read_is_infra_with_the_reason(workspace, tmp_path):
    """A worker of another version answers in a format this one does not read: the run is infra, and says why."""
    spool = spoolfs.layout(tmp_path / "spool")
    stop = threading.Event()

    def old_worker():
        while not stop.is_set():
            spoolfs.write_json_atomic(spool / "workers" / "old.json", {"worker": "old", "pid": 1, "time": time.time()})
            for job in (spool / "jobs").glob("*.json"):
                spoolfs.write_json_atomic(spool / "results" / job.name, {"id": job.stem, "worker": "old",
                                                                         "returncode": 0, "timed_out": False})
                job.unlink()
            time.sleep(0.05)

    thread = threading.Thread(target=old_worker)
    thread.start()
    try:
        result = SpoolRunner(spool, poll=0.05).run(workspace, jobs.job(workspace.head(), "0000", 30))
    finally:
        stop.set()
        thread.join()
    assert result.verdict.triage == Triage.INFRA and result.returncode is None
    assert "is not a SpoolResult (returncode: Extra inputs are not permitted" in result.verdict.reason
    assert "[spool]" in (workspace.dir / "logs" / "0000.log").read_text()


def test_compose_and_images_keep_the_trainer_sandboxed():
    compose = yaml.safe_load((ROOT / "docker" / "compose.yaml").read_text())
    trainer, agent = compose["services"]["trainer"], compose["services"]["agent"]
    assert trainer["network_mode"] == "none"
    assert "env_file" not in trainer and not any("KEY" in k for k in trainer.get("environment", {}))
    mounts = {v.split(":")[1]: v.split(":")[2:] for v in trainer["volumes"]}
    assert mounts["/data"] == ["ro"] and mounts["/workspaces"] == ["ro"] and mounts["/spool"] == []
    assert trainer["deploy"]["resources"]["reservations"]["devices"][0]["capabilities"] == ["gpu"]
    assert trainer["pids_limit"] and trainer["mem_limit"]
    assert "deploy" not in agent and "devices" not in agent and "runtime" not in agent
    assert agent["env_file"] == [".env"] and "--spool" in agent["command"] and "/spool" in agent["command"]
    for name, entry in (("agent", "autoresearch"), ("trainer", "trainer.remote.worker")):
        dockerfile = (ROOT / "docker" / f"{name}.Dockerfile").read_text().splitlines()
        assert any(line.startswith("ENTRYPOINT") and entry in line for line in dockerfile)
    agent_users = [line.split()[1] for line in (ROOT / "docker/agent.Dockerfile").read_text().splitlines()
                   if line.startswith("USER ")]
    assert agent_users and agent_users[-1] not in ("root", "0")
    trainer_file = (ROOT / "docker" / "trainer.Dockerfile").read_text()
    assert "bubblewrap" in trainer_file  # the worker stays root in the container only to make each run a stranger
    assert "HF_HUB_OFFLINE=1" in trainer_file and "fetch_kernels.py" in trainer_file
    assert "flash-attention-3" in (ROOT / "docker" / "fetch_kernels.py").read_text()
    assert "[train]" not in (ROOT / "docker" / "agent.Dockerfile").read_text()
