"""The overnight deployment, built and started for real: docker/compose.yaml with the no-GPU
override and tests/docker/compose.test.yaml, on a private Docker engine (conftest.py).

One deployment serves every assertion: the agent runs a baseline and one experiment proposed by
the loopback LLM server (through the real Anthropic SDK), which turns torch.compile on (over the test track's
compute: a decision all the same) and exits;
the README's compose morning commands run then, as a user types them; then the agent is started
again and stopped with `docker compose stop agent` while its next experiment trains.
"""

from __future__ import annotations

import json
import shlex
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.docker.conftest import ROOT, Engine
from tests.helpers.llm_server import LLMServer, text, tool_call
from tests.helpers.submissions import reasoned
from tests.test_readme_commands import commands
from trainer.remote.spool import SpoolResult, read_message

PROJECT = "autoresearch-test"
TAG = "e2e"
API_KEY = "sk-ant-e2e-0123456789-never-leaves-the-agent"
COMPILE = "COMPILE_ON_CPU = False"
SOFTCAP = "LOGIT_SOFTCAP = 15.0"
RUN_TIMEOUT = 1200.0  # seconds for the first phase (prepare, baseline, one experiment, holdout confirmation)


def submit(description: str, old: str, new: str):
    return tool_call("submit_experiment", reasoned({"description": description,
                                                    "edits": [{"old_string": old, "new_string": new}]}))


@dataclass
class Deployment:
    engine: Engine
    server: LLMServer
    compose: list[str]
    first_exit: int
    agent_log: str
    trainer_log: str
    records: list[dict]
    workspace: Path
    spool: Path
    trainer_env: list[str]
    trainer_network: str
    stop_seconds: float
    records_after_stop: list[dict]
    stop_exit: int
    first_results: list[SpoolResult]
    stopped_results: list[SpoolResult]
    stop_wall: float  # time.time() as the stop was asked for
    morning: dict[str, str]  # the README's compose morning command -> what it printed
    morning_dir: Path  # where those commands ran (a copied report lands here)


def volume(engine: Engine, name: str) -> Path:
    return Path(engine.docker("volume", "inspect", "-f", "{{.Mountpoint}}", f"{PROJECT}_{name}").stdout.strip())


def wait_for(condition, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(1)


def readme_morning() -> list[str]:
    """The README's compose morning: the commands that read a night after the agent has exited."""
    return [c for c in commands(ROOT / "README.md")
            if c.startswith("docker compose") and (" run " in c or " cp " in c) and " up " not in c]


def as_the_test_runs(command: str, compose: list[str], here: Path) -> list[str]:
    """A README compose command on the test's deployment: its compose files and project, its tag, `./` in here."""
    words = shlex.split(command)[2:]
    while words[0] == "-f":
        words = words[2:]
    words = [word.replace("nightly", TAG) for word in words]
    return [*compose, *[str(here / word[2:]) if word.startswith("./") else word for word in words]]


def read_results(spool: Path) -> list[SpoolResult]:
    return [read_message(p, SpoolResult) for p in (spool / "results").glob("*.json")]


def read_records(workspace: Path) -> list[dict]:
    path = workspace / "experiments.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


@pytest.fixture(scope="module")
def deployment(engine: Engine, base_images: dict[str, str], tmp_path_factory) -> Deployment:
    tmp = tmp_path_factory.mktemp("deployment")
    env_file = tmp / "agent.env"
    with LLMServer() as server:
        env_file.write_text(f"ANTHROPIC_API_KEY={API_KEY}\nANTHROPIC_BASE_URL={server.anthropic_base_url()}\n")
        settings = dict(TEST_ENV_FILE=str(env_file), TEST_PYTHON_IMAGE=base_images["python"],
                        TEST_TORCH_IMAGE=base_images["torch"], TAG=TAG, TRACK="test",
                        MODEL="anthropic:claude-opus-4-5", TEST_MAX_EXPERIMENTS="2")
        compose = ["compose", "-p", PROJECT, "-f", str(ROOT / "docker/compose.yaml"),
                   "-f", str(ROOT / "docker/compose.cpu.yaml"), "-f", str(ROOT / "tests/docker/compose.test.yaml")]
        env = dict(engine.env, **settings)

        def docker_compose(*args: str, timeout: float = 900, check: bool = True, **extra):
            return engine.docker(*compose, *args, timeout=timeout, check=check, env=dict(env, **extra))

        engine.docker(*compose, "down", "--volumes", "--remove-orphans", check=False, env=env)
        clock = time.monotonic()
        try:
            docker_compose("build")
            built = time.monotonic()
            server.script(text("ready"),  # the preflight
                          submit("COMPILE_ON_CPU False -> True", COMPILE, COMPILE.replace("False", "True")))
            docker_compose("up", "--detach")
            agent = docker_compose("ps", "--all", "--quiet", "agent").stdout.strip()
            first_exit = int(engine.docker("wait", agent, timeout=RUN_TIMEOUT).stdout.strip())
            agent_log = docker_compose("logs", "--no-color", "agent").stdout
            workspace, spool = volume(engine, "workspaces") / TAG, volume(engine, "spool")
            records, first_results = read_records(workspace), read_results(spool)
            morning_dir, morning = tmp / "morning", {}
            morning_dir.mkdir()
            for command in readme_morning():  # the agent has exited: `exec` would find nothing
                done = engine.docker(*as_the_test_runs(command, compose, morning_dir), env=env, timeout=300)
                morning[command] = done.stdout + done.stderr
            first_phase = time.monotonic()
            trainer = docker_compose("ps", "--quiet", "trainer").stdout.strip()
            inspected = json.loads(engine.docker("inspect", trainer).stdout)[0]

            # Again, one experiment more, stopped while it trains.
            server.script(text("ready"), submit("LOGIT_SOFTCAP 15 -> 20", SOFTCAP, SOFTCAP.replace("15.0", "20.0")))
            docker_compose("up", "--detach", "--no-deps", "agent", TEST_MAX_EXPERIMENTS="4")
            wait_for(lambda: any((workspace / "inflight").glob("*.json")) and any((spool / "claimed").glob("*.json")),
                     300, "the next experiment to start training")
            time.sleep(2)
            started, stop_wall = time.monotonic(), time.time()
            docker_compose("stop", "agent", TEST_MAX_EXPERIMENTS="4")
            stop_seconds = time.monotonic() - started
            agent = docker_compose("ps", "--all", "--quiet", "agent").stdout.strip()
            stop_exit = int(engine.docker("inspect", "-f", "{{.State.ExitCode}}", agent).stdout.strip())
            agent_log += docker_compose("logs", "--no-color", "agent").stdout
            # The worker notices the withdrawn job on its next poll, kills the run and then reports it.
            wait_for(lambda: len(read_results(spool)) > len(first_results), 60, "the withdrawn run's result")
            trainer_log = docker_compose("logs", "--no-color", "trainer").stdout
            print(f"\ncompose build {built - clock:.0f} s, first phase {first_phase - built:.0f} s, "
                  f"second phase {time.monotonic() - first_phase:.0f} s, stop {stop_seconds:.1f} s")
            yield Deployment(engine, server, compose, first_exit, agent_log, trainer_log, records, workspace, spool,
                             inspected["Config"]["Env"], inspected["HostConfig"]["NetworkMode"], stop_seconds,
                             read_records(workspace), stop_exit, first_results,
                             [r for r in read_results(spool) if r not in first_results], stop_wall, morning,
                             morning_dir)
        finally:
            engine.docker(*compose, "down", "--volumes", "--remove-orphans", "--timeout", "5", check=False, env=env)


def test_the_agent_proposed_through_the_llm_api_and_a_decision_was_recorded(deployment):
    assert deployment.first_exit == 0, deployment.agent_log[-3000:]
    proposals = [r for r in deployment.server.requests if r.path == "/v1/messages"]
    assert proposals, "the agent never called the Anthropic API"
    assert all(API_KEY in r.headers.get("x-api-key", "") + r.headers.get("authorization", "") for r in proposals)
    assert [r["proposer"] for r in deployment.records] == ["baseline", "llm"], deployment.records
    baseline, compiled = deployment.records
    assert compiled["description"] == "COMPILE_ON_CPU False -> True" and baseline["val_bpb"]
    # A cold compile costs the small test track's run several times the baseline's CPU seconds: the compute check,
    # on the seconds the trainer container's seal read and the spool carried back, decides it is over budget.
    assert compiled["status"] == "crash" and compiled["triage"] == "over_budget", compiled["reason"]
    assert "CPU seconds before its seal, where the baseline's runs used" in compiled["reason"]
    assert compiled["runs"][0]["cpu_seconds"] > 1.5 * baseline["runs"][0]["cpu_seconds"] > 0


def test_the_trainer_image_compiles(deployment):
    """torch.compile inside the trainer container, in a run's sandbox: inductor built the model's CPU code with the
    image's compiler (on CUDA, Triton's launchers need the same), and the run trained to a number."""
    baseline, compiled = deployment.records
    assert baseline["summary"]["graph_breaks"] == "n/a"  # the baseline trains eagerly on CPU
    assert compiled["summary"]["graph_breaks"] == "0" and compiled["summary"]["recompiles"] == "0", compiled["summary"]
    assert float(compiled["summary"]["warmup_seconds"]) > float(baseline["summary"]["warmup_seconds"])


def test_the_ledger_and_transcripts_are_on_the_workspaces_volume(deployment):
    assert (deployment.workspace / "results.tsv").read_text().count("\n") == 1 + len(deployment.records_after_stop)
    for record in deployment.records:
        events = [json.loads(line) for line in (deployment.workspace / record["transcript"]).read_text().splitlines()]
        assert [e for e in events if e.get("type") == "decision"], events[-3:]


def test_the_trainer_trained_without_network_and_isolated(deployment):
    assert deployment.trainer_network == "none"
    isolated = "runs are isolated (bubblewrap): a uid of their own"
    assert isolated in deployment.trainer_log, deployment.trainer_log[-2000:]
    trained = [r.run for r in deployment.first_results if r.run is not None and r.run.checkpoint_sha256]
    assert len(trained) == 2 and all(r.isolated and r.returncode == 0 for r in trained), deployment.first_results


def test_the_api_key_is_only_in_the_agent(deployment):
    assert not any(API_KEY in variable for variable in deployment.trainer_env)
    assert not any("ANTHROPIC" in variable for variable in deployment.trainer_env)
    leaks = [p for p in deployment.workspace.rglob("*") if p.is_file() and API_KEY.encode() in p.read_bytes()]
    assert leaks == []


def test_compose_stop_records_the_running_experiment_as_interrupted(deployment):
    assert deployment.stop_seconds < 8, f"docker compose stop agent took {deployment.stop_seconds:.1f} s"
    assert deployment.stop_exit == 0, deployment.agent_log[-3000:]
    new = deployment.records_after_stop[len(deployment.records):]
    assert [r["status"] for r in new] == ["interrupted"], new
    assert new[0]["description"] == "LOGIT_SOFTCAP 15 -> 20"
    assert not list((deployment.workspace / "inflight").glob("*.json"))
    # The agent withdrew the job it had handed over: the worker killed that run, unless it had ended on its own
    # before the stop was asked for (a test-track run is short); no run went on after the stop.
    stopped = [r.run.returncode if r.run else r.infra for r in deployment.stopped_results]
    assert len(stopped) == 1, deployment.stopped_results
    assert stopped == [-9] or (stopped == [0] and deployment.stopped_results[0].finished < deployment.stop_wall), (
        deployment.stopped_results, deployment.stop_wall)


def test_the_readme_s_compose_morning_works_after_the_agent_has_exited(deployment):
    said = deployment.morning
    assert any(" status " in c for c in said) and any(" cp " in c for c in said), list(said)
    status = next(output for command, output in said.items() if " status " in command)
    assert f"{TAG}" in status and "best" in status.lower(), status
    copied = list(deployment.morning_dir.rglob("index.html"))
    assert copied and "val_bpb" in copied[0].read_text(), list(deployment.morning_dir.rglob("*"))
