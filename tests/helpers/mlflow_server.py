"""A real `mlflow server` on 127.0.0.1 (sqlite store, local artifacts), started by a test in a directory of its own."""

import os
import socket
import subprocess
import sys
import time
import urllib.request


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def start_mlflow_server(directory, port) -> subprocess.Popen:
    env = dict(os.environ, MLFLOW_SERVER_ENABLE_JOB_EXECUTION="false")
    return subprocess.Popen(
        [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", f"sqlite:///{directory}/mlflow.db",
         "--artifacts-destination", str(directory / "artifacts"), "--host", "127.0.0.1", "--port", str(port),
         "--workers", "1"], cwd=directory, env=env, stdout=open(directory / "server.log", "wb"),
        stderr=subprocess.STDOUT, start_new_session=True)


def wait_healthy(uri: str, server: subprocess.Popen, seconds: float = 240) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert server.poll() is None, "the mlflow server exited"
        try:
            with urllib.request.urlopen(f"{uri}/health", timeout=5) as answer:
                if answer.status == 200:
                    return
        except OSError:
            time.sleep(1)
    raise AssertionError(f"the mlflow server at {uri} did not become healthy in {seconds} s")
