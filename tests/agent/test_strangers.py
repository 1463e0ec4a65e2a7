"""Runs are strangers: a train.py that attacks the machine, replayed through the real loop.

The hostile train.py is the loop's baseline (committed past the edit policy, as if the policy had
missed it) and every experiment built on it carries it too. Each run it tries to: rewrite the
project's evaluator, read the project, plant a git hook and forged ledger records in the workspace
(by relative and absolute path), read the API key from its parent's /proc environ, reach a
loopback server, leave a file in /tmp for the model server (which refuses to build a model if it
finds one), and leave a process behind (fork, setsid, chdir /, execve with an empty environment).
The loop must end with no forged record, no hook run, nothing written outside the run, no process
left, and the honest experiment kept and verified (so the model server saw nothing of the runs').
"""

import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest

from agent.loop import LoopSettings, run_loop
from agent.recording.ledger import Ledger
from agent.running.runner import LocalRunner
from agent.workspace import Workspace
from tests.helpers.processes import alive
from tests.helpers.scripted import ScriptedEdits
from tests.helpers.unprivileged import STRANGER, unprivileged_python, unreachable_by_others
from trainer.sandbox.untrusted import (
    CUT_MARK,
    LOG_HEAD_BYTES,
    LOG_TAIL_BYTES,
    dies_with_caller,
    isolation,
    run_untrusted,
)
from trainer.tracks.hyperparameters import set_hyperparameters

ROOT = Path(__file__).resolve().parents[2]
PROGRAM = ROOT / "prompts" / "program.md"
MATRIX = "MATRIX_LR = 0.0            # times sqrt(max(1, rows / cols))"
API_KEY = "sk-ant-stranger-test-key"
ESCAPEE_SECONDS = "4242"
SMUGGLED = "/tmp/autoresearch-smuggled"
ATTACKS = ("evaluator", "project", "hook", "hook-relative", "ledger", "ledger-relative", "parent-environ",
           "network", "smuggle", "escape", "elsewhere", "elsewhere-write", "leak")
# Whatever succeeds is harmless only if it leaves no trace outside the run: these must fail under isolation.
OUTSIDE = ("evaluator", "project", "hook", "hook-relative", "ledger", "ledger-relative", "network", "elsewhere",
           "elsewhere-write")
LEAK_MARK = "LEAKED-ROWS"

ATTACK_CODE = '''


def stranger_attacks():
    import json
    import socket
    forged = {{"id": "9999", "status": "keep", "val_bpb": 0.01, "verified": True, "commit": "0" * 40}}
    hook = "#!/bin/sh\\ntouch {mark}\\n"

    def write(path, text, mode="a"):
        with open(path, mode) as handle:
            handle.write(text)
        if path.endswith("pre-commit"):
            os.chmod(path, 0o755)
        return path

    def environ():
        return "{key}" in open(f"/proc/{{os.getppid()}}/environ", "rb").read().decode(errors="replace")

    def escape():
        pid = os.fork()
        if pid == 0:
            os.setsid()
            os.chdir("/")
            try:
                os.execve("/bin/sleep", ["sleep", "{escapee}"], {{}})
            finally:
                os._exit(1)
        return pid

    attempts = dict(evaluator=lambda: write("{project}/trainer/evaluator/evaluate.py", "\\n# rewritten by a run\\n"),
                    project=lambda: open("{project}/pyproject.toml").read(20),
                    hook=lambda: write("{workspace}/.git/hooks/pre-commit", hook, "w"),
                    ledger=lambda: write("{workspace}/experiments.jsonl", json.dumps(forged) + "\\n"),
                    network=lambda: socket.create_connection(("127.0.0.1", {port}), timeout=2).close(),
                    smuggle=lambda: write("{smuggled}", "val text", "w"),
                    escape=escape)
    attempts["hook-relative"] = lambda: write("../../.git/hooks/pre-commit", hook, "w")
    attempts["ledger-relative"] = lambda: write("../../experiments.jsonl", json.dumps(forged) + "\\n")
    attempts["parent-environ"] = environ
    # The machine beyond the allowlist: another checkout's files, readable by anyone; a write there through a
    # writer the policy did not know.
    attempts["elsewhere"] = lambda: open("{elsewhere}/.git/config").read(40)
    attempts["elsewhere-write"] = lambda: __import__("pyarrow").OSFile("{elsewhere}/written", "wb").write(b"x")
    # What the model server must never read back: the run's own log (the scored rows, in the red team's night).
    attempts["leak"] = lambda: print("{leak_mark}", "[[1, 2, 3]]", flush=True)
    for name, attempt in attempts.items():
        if name not in {attacks!r}:
            continue
        try:
            print("ATTACK", name, "succeeded:", repr(attempt())[:100], flush=True)
        except Exception as err:
            print("ATTACK", name, "failed:", type(err).__name__, flush=True)


if "AUTORESEARCH_SEAL_FD" in os.environ:
    stranger_attacks()
'''
# In the model server (no seal), a file left in /tmp by a run makes it refuse to build the model. The honest
# experiment keeps this and drops the attacks (which the edit policy would refuse in an experiment).
SMUGGLE_READER = '''
if "AUTORESEARCH_SEAL_FD" not in os.environ and os.path.exists("{smuggled}"):
    raise RuntimeError("the model server found what a run left in /tmp")


def leaked_logs():
    """Logs the model server can read that hold what a run printed: beside its checkpoint, where the workspaces
    are said to be, where they are."""
    from pathlib import Path
    weights = [Path(a) for a in sys.argv if a.endswith(".pt")]
    places = [*(w.resolve().parents[1] / "logs" for w in weights), Path("{workspace}") / "logs",
              Path(os.environ.get("AUTORESEARCH_WORKSPACES", "/nonexistent")) / "t" / "logs"]
    found = []
    for place in places:
        try:
            found += [p for p in place.glob("*.log") if "{leak_mark}" in p.read_text(errors="replace")]
        except OSError:
            continue
    return found


if "AUTORESEARCH_SEAL_FD" not in os.environ and leaked_logs():
    raise RuntimeError(f"the model server read a run's log: {{leaked_logs()}}")
'''


def hostile_source(source: str, workspace: Path, mark: Path, port: int, attacks=ATTACKS,
                   elsewhere: Path = Path("/nonexistent")) -> tuple[str, tuple]:
    """The hostile baseline, and the honest experiment on it: MATRIX_LR 0.0 -> 0.04, without the attacks."""
    values = dict(mark=mark, key=API_KEY, escapee=ESCAPEE_SECONDS, project=ROOT, workspace=workspace, port=port,
                  smuggled=SMUGGLED, attacks=attacks, elsewhere=elsewhere, leak_mark=LEAK_MARK)
    source = set_hyperparameters(source, {"MATRIX_LR": 0.0})
    hostile = MATRIX + SMUGGLE_READER.format(**values) + ATTACK_CODE.format(**values)
    honest = MATRIX.replace("0.0 ", "0.04") + SMUGGLE_READER.format(**values)
    return source.replace(MATRIX, hostile), ("MATRIX_LR 0.0 -> 0.04", hostile, honest)


def attack_results(log: Path) -> dict[str, str]:
    return {line.split()[1]: " ".join(line.split()[2:]) for line in log.read_text().splitlines()
            if line.startswith("ATTACK ")}


def escapees() -> list[int]:
    found = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            if (entry / "cmdline").read_bytes() == b"sleep\0" + ESCAPEE_SECONDS.encode() + b"\0":
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def fingerprint(directory: Path) -> dict[str, str]:
    return {str(p.relative_to(directory)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(directory.rglob("*")) if p.is_file() and ".venv" not in p.parts and ".git" not in p.parts
            and "__pycache__" not in p.parts and ".pytest_cache" not in p.parts}


@pytest.fixture
def listener():
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    yield server.getsockname()[1]
    server.close()


@pytest.fixture
def elsewhere():
    """Outside /tmp and $HOME, as in the compose deployment: the workspaces, and another checkout of the project
    that anyone may read."""
    root = Path(tempfile.mkdtemp(prefix="autoresearch-strangers-", dir="/var/tmp" if Path("/var/tmp").is_dir()
                                 else None))
    root.chmod(0o755)
    (root / "other-checkout" / ".git").mkdir(parents=True)
    (root / "other-checkout" / ".git" / "config").write_text("[remote]\n\turl = https://token@example.invalid\n")
    for path in [root / "other-checkout", *(root / "other-checkout").rglob("*")]:
        path.chmod(0o777 if path.is_dir() else 0o644)
    yield root
    shutil.rmtree(root, ignore_errors=True)


@pytest.mark.skipif(not isolation().available, reason=isolation().note)
def test_a_hostile_run_reaches_nothing_outside_its_directory(test_track, elsewhere, listener, monkeypatch):
    monkeypatch.setenv("AUTORESEARCH_WORKSPACES", str(elsewhere / "workspaces"))
    workspace = Workspace.create("t", test_track.spec, PROGRAM, root=elsewhere / "workspaces")
    mark = elsewhere / "hook-ran"
    project_before = fingerprint(ROOT / "trainer")
    source, edit = hostile_source(workspace.file_at("train.py"), workspace.dir, mark, listener,
                                  elsewhere=elsewhere / "other-checkout")
    workspace.advance_to(workspace.commit_train(source, "a train.py that attacks the machine"))
    messages = []
    run_loop(workspace, ScriptedEdits(edit), LocalRunner(), LoopSettings(max_experiments=2, noise_seeds=0),
             say=messages.append)

    assert any("runs are isolated" in m for m in messages), messages
    results = attack_results(workspace.dir / "logs" / "0000.log")
    assert sorted(results) == sorted(ATTACKS), results  # every attack ran ...
    assert [name for name in OUTSIDE if not results[name].startswith("failed:")] == [], results  # ... in vain
    assert results["parent-environ"] != "succeeded: True", results
    assert LEAK_MARK in (workspace.dir / "logs" / "0000.log").read_text()
    baseline, honest = Ledger(workspace.dir).records
    # The model server saw neither the file the run left in /tmp nor the run's log beside its checkpoint.
    assert honest.status == "keep" and honest.verified, honest.reason
    assert [json.loads(line)["id"] for line in (workspace.dir / "experiments.jsonl").read_text().splitlines()] \
        == ["0000", "0001"]
    assert not (workspace.dir / ".git" / "hooks" / "pre-commit").exists() and not mark.exists()
    assert fingerprint(ROOT / "trainer") == project_before and not Path(SMUGGLED).exists()
    assert not (elsewhere / "other-checkout" / "written").exists()
    assert escapees() == [] and not any(workspace.runs_dir.iterdir())
    assert workspace.head() == honest.commit and workspace.is_clean()


UNPRIVILEGED_LOOP = textwrap.dedent("""
    import json, sys
    from pathlib import Path
    from agent.loop import LoopSettings, LoopStopped, run_loop
    from agent.running.runner import LocalRunner
    from agent.workspace import Workspace
    from tests.helpers.scripted import ScriptedEdits

    root, edit = Path(sys.argv[1]), json.loads(sys.argv[2])
    workspace = Workspace.open("t", root=root)
    try:
        print(run_loop(workspace, ScriptedEdits(tuple(edit)), LocalRunner(), LoopSettings(max_experiments=2,
                       noise_seeds=0), say=lambda m: print(m, flush=True)))
    except LoopStopped as err:
        print("stopped:", err)
""")
FAILING_BWRAP = "#!/bin/sh\necho 'bwrap: No permissions to creating new namespace' >&2\nexit 1\n"


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None,
                    reason="starts the loop as an unprivileged user through setpriv, which needs root")
def test_an_unprivileged_loop_without_isolation_says_so_and_keeps_its_key_and_hooks(test_track, listener):
    """As a user on a machine where bwrap cannot make namespaces (a stand-in bwrap refuses as the real one does
    there): `run` says runs are not isolated; the run cannot read the API key from its parent, the hook it plants
    never runs, and the process it leaves behind is killed. (Its writes as the same user do land, and the model
    server sees what it left in /tmp: the baseline's number cannot be verified.)"""
    if shut := unreachable_by_others(ROOT, Path(sys.prefix)):
        pytest.skip(f"uid 65534 cannot reach the project or its packages: {', '.join(shut)} cannot be searched "
                    "by other users")
    home = Path(tempfile.mkdtemp(prefix="autoresearch-unprivileged-"))
    try:
        home.chmod(0o755)
        shutil.copytree(test_track.directory.parent, home / "cache")
        (home / "bin").mkdir()
        (home / "bin" / "bwrap").write_text(FAILING_BWRAP)
        (home / "bin" / "bwrap").chmod(0o755)
        mark = home / "hook-ran"
        workspace = Workspace.create("t", test_track.spec, PROGRAM, root=home / "workspaces")
        # Not the ledger: a run as the loop's own user, unisolated, can write it (which is why `run` says so).
        attacks = tuple(a for a in ATTACKS if not a.startswith("ledger"))
        source, edit = hostile_source(workspace.file_at("train.py"), workspace.dir, mark, listener, attacks)
        workspace.advance_to(workspace.commit_train(source, "a train.py that attacks the machine"))
        subprocess.run(["chown", "-R", "65534:65534", str(home)], check=True)
        env = {**os.environ, "HOME": str(home), "ANTHROPIC_API_KEY": API_KEY, "PYTHONPATH": str(ROOT),
               "PATH": f"{home}/bin:{os.environ['PATH']}", "AUTORESEARCH_CACHE": str(home / "cache"),
               "TMPDIR": str(home)}
        python = unprivileged_python(home)  # after the chown: it may hold a hard link to the interpreter
        loop = subprocess.run([*STRANGER, python, "-c", UNPRIVILEGED_LOOP, str(home / "workspaces"), json.dumps(edit)],
                              env=env, cwd=ROOT, capture_output=True, text=True, timeout=600)
        assert loop.returncode == 0, loop.stdout + loop.stderr
        assert "runs are NOT isolated" in loop.stdout and "No permissions" in loop.stdout, loop.stdout

        results = attack_results(workspace.dir / "logs" / "0000.log")
        assert sorted(results) == sorted(attacks), results
        assert results["parent-environ"].startswith("failed:"), results  # the loop is not dumpable
        assert results["hook"].startswith("succeeded:") and results["escape"].startswith("succeeded:"), results
        assert not mark.exists()  # the hook was written and the next commit did not run it
        assert escapees() == []  # the setsid + empty-environment process was found and killed
        assert API_KEY not in (workspace.dir / "logs" / "0000.log").read_text()
        # What is left open without isolation: the model server met the file the run left in /tmp, so the baseline's
        # own number could not be verified, and the loop stopped saying so. The model process's own words are in the
        # evaluator's log for a person; the reason (which proposers read) names that log and quotes none of it.
        baseline = Ledger(workspace.dir).records[-1]
        assert baseline.status == "crash" and "cannot be verified" in baseline.reason, baseline.reason
        assert "left in /tmp" not in baseline.reason and "verify-0000.log" in baseline.reason, baseline.reason
        evaluator_log = next(workspace.dir.rglob("verify-0000.log")).read_text()
        assert "the model server found what a run left in /tmp" in evaluator_log, evaluator_log[-2000:]
        assert "stopped: the baseline did not produce a result" in loop.stdout, loop.stdout
    finally:
        shutil.rmtree(home, ignore_errors=True)
        Path(SMUGGLED).unlink(missing_ok=True)


def test_a_flood_of_output_costs_a_capped_log(tmp_path):
    """40 MB printed without pause: the log keeps its head and tail and says how much was cut between."""
    flood = "import sys\nsys.stdout.write('first line\\n' + ('x' * 1023 + '\\n') * 40 * 1024 + 'last line\\n')\n"
    (tmp_path / "flood.py").write_text(flood)
    outcome = run_untrusted([sys.executable, "flood.py"], tmp_path, tmp_path / "run.log", 60, {})
    assert outcome.returncode == 0
    log = (tmp_path / "run.log").read_bytes()
    assert len(log) < LOG_HEAD_BYTES + LOG_TAIL_BYTES + 200
    assert log.startswith(b"first line\n") and log.endswith(b"last line\n")
    cut = next(line for line in log.decode().splitlines() if line.startswith(CUT_MARK))
    assert int(cut.split()[2]) == 40 * 1024 * 1024 + len("first line\nlast line\n") - LOG_HEAD_BYTES - LOG_TAIL_BYTES


CALLER = """
import sys, threading
from pathlib import Path
from trainer.sandbox.untrusted import run_untrusted

def busy():
    while True:
        sorted(range(1000), key=str)

for _ in range(3):  # started among busy threads, as a loop starts runs while others are judged
    threading.Thread(target=busy, daemon=True).start()
directory = Path(sys.argv[1])
run = "import os, time; open('run.pid', 'w').write(str(os.getpid())); time.sleep(600)"
run_untrusted([sys.executable, "-c", run], directory, directory / "run.log", 600, {})
"""


def test_a_run_dies_with_the_process_that_started_it(tmp_path):
    """A loop killed by SIGKILL leaves no run training on: the run gets SIGKILL when its caller dies."""
    if not dies_with_caller():
        pytest.skip("setpriv (util-linux) is missing: a run outlives a caller killed by SIGKILL")
    caller = subprocess.Popen([sys.executable, "-c", CALLER, str(tmp_path)], cwd=ROOT)
    pid_file, run_pid = tmp_path / "run.pid", None
    try:
        deadline = time.monotonic() + 60
        while not pid_file.exists() or not pid_file.read_text():
            assert caller.poll() is None and time.monotonic() < deadline, "the run never started"
            time.sleep(0.1)
        run_pid = int(pid_file.read_text())
        caller.kill()
        caller.wait()
        deadline = time.monotonic() + 10
        while alive(run_pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not alive(run_pid), "the run outlived the process that started it"
    finally:
        caller.kill()
        if run_pid is not None and alive(run_pid):
            os.kill(run_pid, signal.SIGKILL)


def test_a_planted_git_config_is_refused_by_name(workspace, tmp_path):
    from agent.workspace import WorkspaceError
    mark = tmp_path / "fsmonitor-ran"
    config = workspace.dir / ".git" / "config"
    config.write_text(config.read_text() + f"[core]\n\tfsmonitor = touch {mark}\n")
    with pytest.raises(WorkspaceError, match="core.fsmonitor"):
        Workspace.open("t", root=workspace.dir.parent)
    assert not mark.exists()
