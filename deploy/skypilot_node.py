"""The run of deploy/skypilot.yaml on one node: a Ray cluster of our own across the task's nodes, and the agent
on the head.

Every node starts `ray start --block` on AUTORESEARCH_RAY_PORT (6379; SkyPilot's own Ray is on 6380 and is left
alone: no `ray stop`, no address "auto"), from an environment without the keys SkyPilot gave the task, so that no
Ray worker and no run holds them. Rank 0 is the head: it waits for the other nodes to join, runs
`autoresearch ARGUMENTS --ray-address HEAD:PORT $AUTORESEARCH_ARGS` with the keys (ARGUMENTS: this script's,
`run` in the task), then stops its Ray node and exits with the agent's status. Every other node
joins the head once it answers and stays while it answers; then it stops its Ray node and exits 0, as it does if
its own Ray node dies: a non-zero exit would make SkyPilot kill the head's night. Ray nodes are stopped through
the pid of the `ray start --block` this script started, which takes its Ray processes down with it.

Settings (environment): SKYPILOT_NODE_RANK, SKYPILOT_NODE_IPS, SKYPILOT_NUM_NODES, SKYPILOT_NUM_GPUS_PER_NODE
(set by SkyPilot); AUTORESEARCH_ARGS; AUTORESEARCH_RAY_PORT; AUTORESEARCH_RAY_START_ARGS (more `ray start`
arguments, e.g. --temp-dir); AUTORESEARCH_NODES_WAIT (seconds the head waits for the others, default 600).
"""

from __future__ import annotations

import os
import shlex
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass

from trainer.sandbox.untrusted import SECRET_NAME

DEFAULT_PORT = 6379
POLL = 5.0               # seconds between a worker's looks at the head
HEAD_GONE_AFTER = 3      # looks in a row at a head that does not answer
STOP_GRACE = 30.0        # seconds a Ray node is given to stop on SIGTERM


class NodeError(Exception):
    """A setting is missing or wrong, or the cluster did not come up; the message says which and what to do."""


@dataclass(frozen=True)
class Node:
    rank: int
    ips: tuple[str, ...]
    gpus: int
    port: int

    @property
    def head_ip(self) -> str:
        return self.ips[0]

    @property
    def ip(self) -> str:
        return self.ips[self.rank]

    @property
    def head_address(self) -> str:
        return f"{self.head_ip}:{self.port}"


def node_from_environment(env: dict[str, str]) -> Node:
    def number(name: str, default: str | None = None) -> int:
        value = env.get(name, default)
        if value is None or not value.strip().isdigit():
            found = "not set" if value is None else f"{value!r}, not a whole number"
            raise NodeError(f"{name} is {found}: this script runs as the `run` of deploy/skypilot.yaml, where "
                            "SkyPilot sets it (set it by hand elsewhere)")
        return int(value)

    ips = tuple(line.strip() for line in env.get("SKYPILOT_NODE_IPS", "").splitlines() if line.strip())
    rank, count = number("SKYPILOT_NODE_RANK"), number("SKYPILOT_NUM_NODES")
    if len(ips) != count or rank >= count:
        raise NodeError(f"SKYPILOT_NODE_IPS lists {len(ips)} IPs for SKYPILOT_NUM_NODES={count} and "
                        f"SKYPILOT_NODE_RANK={rank}: it needs one IP a line, the head's first")
    return Node(rank=rank, ips=ips, gpus=number("SKYPILOT_NUM_GPUS_PER_NODE", "0"),
                port=number("AUTORESEARCH_RAY_PORT", str(DEFAULT_PORT)))


def keyless(env: dict[str, str]) -> dict[str, str]:
    """The environment without anything named like a key, for the Ray node (its workers inherit it)."""
    return {name: value for name, value in env.items() if not SECRET_NAME.search(name)}


def answers(address: str) -> bool:
    host, _, port = address.rpartition(":")
    try:
        socket.create_connection((host, int(port)), timeout=5).close()
        return True
    except OSError:
        return False


def say(node: Node, message: str) -> None:
    print(f"[node {node.rank} {node.ip}] {message}", flush=True)


def start_ray(node: Node, env: dict[str, str]) -> subprocess.Popen:
    role = ["--head", f"--port={node.port}"] if node.rank == 0 else [f"--address={node.head_address}"]
    command = [sys.executable, "-m", "ray.scripts.scripts", "start", "--block", *role, f"--node-ip-address={node.ip}",
               f"--num-gpus={node.gpus}", "--disable-usage-stats",
               *shlex.split(env.get("AUTORESEARCH_RAY_START_ARGS", ""))]
    say(node, "starting " + shlex.join(command))
    return subprocess.Popen(command, env=keyless(env))


def stop(node: Node, process: subprocess.Popen, what: str) -> int:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(STOP_GRACE)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    say(node, f"{what} (pid {process.pid}) stopped")
    return process.returncode


def wait_until(check, timeout: float, why_not: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise NodeError(why_not)
        time.sleep(1.0)


def wait_for_nodes(node: Node, wait: float) -> None:
    """Until every node's Ray has joined the head, or `wait` seconds; as a Ray driver that leaves before the agent
    connects (and before the head stops: a driver whose cluster goes away aborts)."""
    import ray
    ray.init(address=node.head_address, log_to_driver=False, logging_level="WARNING")
    try:
        def joined() -> int:
            return sum(1 for found in ray.nodes() if found["Alive"])
        try:
            wait_until(lambda: joined() >= len(node.ips), wait, "")
            say(node, f"all {len(node.ips)} Ray nodes joined")
        except NodeError:
            say(node, f"only {joined()} of {len(node.ips)} Ray nodes joined within {wait:.0f} s; the night starts "
                      "with those (it sizes itself to the GPUs there when it starts)")
    finally:
        ray.shutdown()


def run_head(node: Node, env: dict[str, str], ray_node: subprocess.Popen, arguments: list[str]) -> int:
    wait_until(lambda: ray_node.poll() is None and answers(node.head_address), 120,
               f"the Ray head did not come up on {node.head_address} (see the `ray start` output above)")
    wait_for_nodes(node, float(env.get("AUTORESEARCH_NODES_WAIT", "600")))
    command = [sys.executable, "-m", "agent.cli", *arguments, "--ray-address", node.head_address,
               *shlex.split(env.get("AUTORESEARCH_ARGS", ""))]
    say(node, "running " + shlex.join(command))
    agent = subprocess.Popen(command, env=env)
    try:
        return agent.wait()
    except KeyboardInterrupt:  # SIGTERM or Ctrl-C to this script: the agent stops the way it does on its own
        agent.send_signal(signal.SIGTERM)
        return agent.wait()


def run_worker(node: Node, env: dict[str, str]) -> int:
    wait_until(lambda: answers(node.head_address), float(env.get("AUTORESEARCH_NODES_WAIT", "600")),
               f"the Ray head at {node.head_address} did not answer")
    ray_node = start_ray(node, env)
    try:
        missed = 0
        while missed < HEAD_GONE_AFTER:
            time.sleep(POLL)
            if ray_node.poll() is not None:
                say(node, f"this node's Ray stopped on its own (exit {ray_node.returncode}); the head goes on "
                          "with the other nodes")
                return 0
            missed = 0 if answers(node.head_address) else missed + 1
        say(node, f"the head at {node.head_address} is gone: stopping this node")
        return 0
    finally:
        stop(node, ray_node, "this node's Ray")


def main(arguments: list[str]) -> int:
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    env = dict(os.environ)
    try:
        node = node_from_environment(env)
        if node.rank != 0:
            return run_worker(node, env)
        if not arguments:
            raise NodeError("the head needs the agent's command: skypilot_node.py run")
        ray_node = start_ray(node, env)
        try:
            return run_head(node, env, ray_node, arguments)
        finally:
            stop(node, ray_node, "the Ray head")
    except NodeError as err:
        print(f"error: {err}", file=sys.stderr, flush=True)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
