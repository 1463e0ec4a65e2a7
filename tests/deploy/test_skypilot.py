"""deploy/skypilot.yaml: read by SkyPilot's own loader (in a virtual environment of its own, made by
scripts/skypilot_venv.sh: SkyPilot's pins do not fit the project's), and its setup and run executed as SkyPilot
would on two nodes, here two processes on this machine's loopback, each with its own Ray temp directory and ports,
the head's agent running a short night on that Ray cluster."""

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import yaml

from agent.recording.ledger import Ledger
from tests.helpers.processes import alive
from trainer.sandbox.untrusted import SECRET_NAME

ROOT = Path(__file__).resolve().parents[2]
TASK = ROOT / "deploy" / "skypilot.yaml"
SKYPILOT_PYTHON = Path(os.environ.get("AUTORESEARCH_SKYPILOT_PYTHON", ROOT / ".venv-skypilot" / "bin" / "python"))
FAKE_KEY = "sk-ant-skypilot-test-only-0001"

LOAD = """
import json, sys
import sky
from sky.utils import yaml_utils
path, overrides = sys.argv[1], json.loads(sys.argv[2])
task = sky.Task.from_yaml(path)
resources = list(task.resources)
launched = sky.Task.from_yaml_config(yaml_utils.read_yaml(path),
                                     env_overrides=overrides["env"], secrets_overrides=overrides["secrets"])
launched.num_nodes = overrides["num_nodes"]
launched.set_resources_override({"accelerators": overrides["gpus"]})
print(json.dumps({
    "version": sky.__version__, "name": task.name, "num_nodes": task.num_nodes, "workdir": task.workdir,
    "accelerators": [r.accelerators for r in resources], "envs": task.envs,
    "inline_secrets": sorted(task.secrets), "secrets_asked": sorted(ref.name for ref in task.managed_secret_refs),
    "setup": task.setup, "run": task.run,
    "autostop": {key: getattr(resources[0].autostop_config, key) for key in ("enabled", "idle_minutes", "down")},
    "launched": {"num_nodes": launched.num_nodes, "accelerators": [r.accelerators for r in launched.resources],
                 "envs": launched.envs, "secrets": sorted(launched.secrets)},
}))
"""


def raw_task() -> dict:
    return yaml.safe_load(TASK.read_text())


def test_the_task_file_holds_no_key_and_asks_for_none_a_user_may_not_have():
    task = raw_task()
    assert "secrets" not in task  # either provider's key comes at launch, `--secret NAME`
    assert task["resources"]["autostop"] == {"idle_minutes": 30}  # stops, never deletes, an idle cluster
    for name, value in task["envs"].items():
        assert not SECRET_NAME.search(name) or value is None, f"{name} has a value in {TASK.name}"
    assert not re.search(r"sk-[A-Za-z0-9-]{8,}", TASK.read_text())


@pytest.mark.skipif(not SKYPILOT_PYTHON.exists(), reason=f"no SkyPilot at {SKYPILOT_PYTHON}: make test (or bash "
                                                          "scripts/skypilot_venv.sh) installs it")
def test_skypilots_own_loader_reads_the_task_and_takes_the_launch_overrides():
    overrides = {"env": [("AUTORESEARCH_ARGS", "--tag t --proposer optuna")],
                 "secrets": [("OPENAI_API_KEY", FAKE_KEY)], "num_nodes": 4, "gpus": "A100:2"}
    loaded = subprocess.run([str(SKYPILOT_PYTHON), "-c", LOAD, str(TASK), json.dumps(overrides)], cwd=ROOT,
                            capture_output=True, text=True, timeout=120)
    assert loaded.returncode == 0, loaded.stderr
    task = json.loads(loaded.stdout)
    assert task["version"] == "0.14.1"
    assert task["name"] == "autoresearch" and task["num_nodes"] == 2 and task["accelerators"] == [{"H100": 1}]
    assert Path(task["workdir"]).resolve() == ROOT
    # No key in the task and none asked for: an OpenAI-only user launches with `--secret OPENAI_API_KEY` alone.
    assert task["inline_secrets"] == [] and task["secrets_asked"] == []
    assert not any(SECRET_NAME.search(name) for name in task["envs"])
    assert task["setup"].strip() == "bash deploy/skypilot_setup.sh"
    assert task["run"].strip().endswith("deploy/skypilot_node.py run")
    # `sky launch --num-nodes 4 --gpus A100:2 --env ... --secret OPENAI_API_KEY`
    launched = task["launched"]
    assert launched["num_nodes"] == 4 and launched["accelerators"] == [{"A100": 2}]
    assert launched["envs"]["AUTORESEARCH_ARGS"] == "--tag t --proposer optuna"
    assert launched["secrets"] == ["OPENAI_API_KEY"]
    assert task["autostop"] == {"enabled": True, "idle_minutes": 30, "down": False}


def node_script(env: dict[str, str], *arguments: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "deploy" / "skypilot_node.py"), *arguments], cwd=ROOT,
                          env={name: value for name, value in os.environ.items() if not name.startswith("SKYPILOT_")}
                          | env, capture_output=True, text=True, timeout=60)


def test_the_node_script_outside_skypilot_or_with_wrong_settings_says_what_is_wrong():
    outside = node_script({}, "run")
    assert outside.returncode == 2 and "SKYPILOT_NODE_RANK is not set" in outside.stderr
    assert "run` of deploy/skypilot.yaml" in outside.stderr
    nodes = {"SKYPILOT_NODE_RANK": "0", "SKYPILOT_NUM_NODES": "2", "SKYPILOT_NODE_IPS": "10.0.0.1"}
    short = node_script(nodes, "run")
    assert short.returncode == 2 and "SKYPILOT_NODE_IPS lists 1 IPs for SKYPILOT_NUM_NODES=2" in short.stderr
    headless = node_script(nodes | {"SKYPILOT_NODE_IPS": "10.0.0.1\n10.0.0.2"})
    assert headless.returncode == 2 and "the head needs the agent's command" in headless.stderr


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def processes_naming(text: str) -> list[int]:
    """Processes whose command line holds text (our own temp directories: no other process names them)."""
    found = []
    for entry in Path("/proc").glob("[0-9]*"):
        if text in command_line(int(entry.name)):
            found.append(int(entry.name))
    return found


def command_line(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def environment_of(pid: int) -> dict[str, str]:
    try:
        pairs = (Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"))
    except OSError:
        return {}
    return dict(pair.decode(errors="replace").split("=", 1) for pair in pairs if b"=" in pair)


def test_the_setup_installs_the_project_with_ray_and_torch_into_the_nodes_environment(tmp_path):
    """Reduced: offline (PIP_NO_INDEX), without the constraints file, into a throwaway environment whose
    dependencies are those of the environment running the tests (a .pth file; its own setuptools removed so that
    the build uses theirs). What it installs there is the project itself, as on a node."""
    venv = tmp_path / "node-venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    site = next((venv / "lib").glob("python3*/site-packages"))
    for bundled in ("setuptools", "_distutils_hack", "pkg_resources", "distutils-precedence.pth"):
        for path in site.glob(bundled + "*"):
            subprocess.run(["rm", "-rf", str(path)], check=True)
    deps = next(p for p in map(Path, sys.path) if p.name == "site-packages" and (p / "ray").is_dir())
    (site / "project-deps.pth").write_text(f"{deps}\n")
    env = {name: value for name, value in os.environ.items() if name != "PYTHONPATH"}
    env.update(AUTORESEARCH_VENV=str(venv), AUTORESEARCH_CONSTRAINTS="/dev/null", PIP_NO_INDEX="1",
               PIP_NO_BUILD_ISOLATION="0")
    setup = subprocess.run(["bash", "-c", raw_task()["setup"]], cwd=ROOT, env=env, capture_output=True, text=True,
                           timeout=300)
    assert setup.returncode == 0, setup.stdout + setup.stderr
    assert "node ready: ray 2.60.0, torch" in setup.stdout
    installed = subprocess.run([str(venv / "bin" / "python"), "-c", "import agent, trainer.remote.ray_task; "
                                "print(agent.__file__)"], env=env, capture_output=True, text=True, timeout=60)
    assert Path(installed.stdout.strip()).is_relative_to(ROOT), installed.stderr
    assert (venv / "bin" / "autoresearch").exists()


def test_the_task_runs_a_night_on_a_two_node_ray_cluster_and_stops_all_it_started(test_track, tmp_path):
    """The run, as SkyPilot runs it on two nodes, with the environment running the tests as the nodes'
    (AUTORESEARCH_VENV): the runs' sandbox shows a node only its own environment, which the throwaway one of the
    setup's test is not."""
    task = raw_task()
    env = {name: value for name, value in os.environ.items() if not name.startswith(("RAY_", "SKYPILOT_"))}
    env.update(AUTORESEARCH_VENV=sys.prefix)
    workspaces = tmp_path / "workspaces"
    temp_dirs = [Path(tempfile.mkdtemp(prefix=f"rsky{rank}-", dir="/tmp")) for rank in (0, 1)]  # short: sockets
    port, dashboard = free_port(), free_port()
    ray_args = f"--num-cpus=1 --object-store-memory={200 << 20}"
    env.update({name: str(value) for name, value in task["envs"].items()})
    env.update(SKYPILOT_NODE_IPS="127.0.0.1\n127.0.0.1", SKYPILOT_NUM_NODES="2", SKYPILOT_NUM_GPUS_PER_NODE="1",
               AUTORESEARCH_RAY_PORT=str(port), AUTORESEARCH_NODES_WAIT="180", ANTHROPIC_API_KEY=FAKE_KEY,
               AUTORESEARCH_ARGS=f"--tag sky --track test --proposer optuna --max-experiments 2 --noise-seeds 0 "
                                 f"--workspaces {workspaces}")
    head_args = f"--temp-dir={temp_dirs[0]} {ray_args} --include-dashboard=false --dashboard-port={dashboard}"
    nodes, seen_environments, node_ids = [], {}, set()
    try:
        for rank, more in ((0, head_args), (1, f"--temp-dir={temp_dirs[1]} {ray_args}")):
            node_env = env | {"SKYPILOT_NODE_RANK": str(rank), "AUTORESEARCH_RAY_START_ARGS": more}
            nodes.append(subprocess.Popen(["bash", "-c", task["run"]], cwd=ROOT, env=node_env, text=True,
                                          stdout=open(tmp_path / f"node{rank}.log", "w"),
                                          stderr=subprocess.STDOUT))
        deadline = time.monotonic() + 600
        while nodes[0].poll() is None:
            assert time.monotonic() < deadline, "the head's night did not end"
            assert nodes[1].poll() is None, "the worker's run ended while the head's went on"
            for temp_dir in temp_dirs:  # the Ray processes of both nodes, while they run
                for pid in processes_naming(str(temp_dir)):
                    seen_environments.setdefault(pid, environment_of(pid))
                    node_ids.update(re.findall(r"--node_id=([0-9a-f]{16,})", command_line(pid)))
            time.sleep(1)
        nodes[1].wait(120)  # the worker sees the head gone and stops
        head_log, worker_log = ((tmp_path / f"node{rank}.log").read_text() for rank in (0, 1))
        assert nodes[0].returncode == 0, head_log[-6000:]
        assert nodes[1].returncode == 0, worker_log[-3000:]
    finally:
        for node in nodes:
            if node.poll() is None:
                node.send_signal(signal.SIGTERM)
                node.wait(60)
        deadline = time.monotonic() + 15
        while (left := [pid for temp_dir in temp_dirs for pid in processes_naming(str(temp_dir)) if alive(pid)]) \
                and time.monotonic() < deadline:
            time.sleep(0.5)
        for pid in left:
            os.kill(pid, signal.SIGKILL)
        for temp_dir in temp_dirs:
            shutil.rmtree(temp_dir, ignore_errors=True)
    assert not left, f"processes of the test's Ray nodes outlived them: {left}"

    assert "all 2 Ray nodes joined" in head_log and f"--ray-address 127.0.0.1:{port}" in head_log
    assert f"the head at 127.0.0.1:{port} is gone" in worker_log
    records = Ledger(workspaces / "sky").records
    assert len(records) == 2 and records[0].status == "keep"
    places = [run.where for record in records for run in record.runs]
    assert len(node_ids) == 2, node_ids  # the raylets of the two nodes
    ran_on = {re.fullmatch(r"ray node [0-9.]+ \(([0-9a-f]{8})\)", where).group(1) for where in places}
    assert ran_on and ran_on <= {node_id[:8] for node_id in node_ids}, (places, node_ids)
    # Both nodes' Ray processes ran without the key the agent was given.
    assert len(seen_environments) >= 4
    assert not any(FAKE_KEY in environment.values() or "ANTHROPIC_API_KEY" in environment
                   for environment in seen_environments.values())
