"""A private Docker engine and the images the deployment test builds on (scripts/docker_engine.sh).

The engine keeps its data root in $AUTORESEARCH_DOCKER_TEST_DIR (default
~/.cache/autoresearch/docker-test) on purpose: base images and build layers stay there between
runs, so that a second run builds in seconds. The engine itself is stopped after the tests, also
when they fail, and the test's containers and volumes are removed. `rm -rf` that directory (while
no test runs) gives the disk back.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ENGINE_SCRIPT = ROOT / "scripts" / "docker_engine.sh"
DEBIAN_IMAGE = "autoresearch-test/debian:bookworm"
BASES = ROOT / "tests" / "docker" / "base"


def versioned(image: str, dockerfile: Path) -> str:
    """image tagged with its Dockerfile's hash: a kept base image is rebuilt once its Dockerfile changes."""
    return f"{image}-{hashlib.sha256(dockerfile.read_bytes()).hexdigest()[:12]}"


PYTHON_IMAGE = versioned("autoresearch-test/python:3.11", BASES / "python.Dockerfile")
TORCH_IMAGE = versioned("autoresearch-test/torch:cpu", BASES / "torch.Dockerfile")
TORCH_WHEEL = "torch==2.13.0+cpu"
HOST_CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")


@dataclass(frozen=True)
class Engine:
    directory: Path
    env: dict[str, str]

    def docker(self, *args: str, timeout: float = 900, check: bool = True,
               env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        done = subprocess.run(["docker", *args], env=env or self.env, capture_output=True, text=True, timeout=timeout)
        if check and done.returncode != 0:
            raise AssertionError(f"docker {' '.join(args)} failed ({done.returncode}):\n{done.stdout[-3000:]}\n"
                                 f"{done.stderr[-3000:]}")
        return done

    def has_image(self, name: str) -> bool:
        return self.docker("image", "inspect", name, check=False).returncode == 0


def engine_directory() -> Path:
    return Path(os.environ.get("AUTORESEARCH_DOCKER_TEST_DIR", Path.home() / ".cache/autoresearch/docker-test"))


def missing_tools(directory: Path) -> str | None:
    """Why the engine cannot run here, or None."""
    if os.geteuid() != 0:
        return "the deployment test starts its own Docker engine and needs root (CI runs `make test` as root)"
    for tool, package in (("dockerd", "docker.io"), ("docker", "docker.io"), ("mmdebstrap", "mmdebstrap")):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (`apt-get install --no-install-recommends {package}`, " \
                   "or run `make test` as root, which installs it)"
    if not (directory / "config" / "cli-plugins" / "docker-compose").exists():
        return f"the Compose plugin is missing in {directory}/config/cli-plugins (bash scripts/test_docker.sh)"
    return None


@pytest.fixture(scope="session")
def engine() -> Engine:
    directory = engine_directory()
    why = missing_tools(directory)
    if why:
        pytest.skip(why)
    env = dict(os.environ, DOCKER_HOST=f"unix://{directory / 'docker.sock'}", DOCKER_CONFIG=str(directory / "config"),
               DOCKER_BUILDKIT="0", COMPOSE_BAKE="false")
    subprocess.run(["bash", str(ENGINE_SCRIPT), "start", str(directory)], check=True, timeout=120)
    try:
        yield Engine(directory, env)
    finally:
        subprocess.run(["bash", str(ENGINE_SCRIPT), "stop", str(directory)], timeout=120)


@pytest.fixture(scope="session")
def base_images(engine: Engine) -> dict[str, str]:
    """The stand-ins for python:3.11-slim and the PyTorch image, built once and kept in the engine."""
    if not engine.has_image(DEBIAN_IMAGE):
        subprocess.run(["bash", str(ENGINE_SCRIPT), "base", str(engine.directory), DEBIAN_IMAGE], check=True,
                       timeout=900, env=engine.env)
    with tempfile.TemporaryDirectory(prefix="autoresearch-base-") as tmp:
        context = Path(tmp)
        if not engine.has_image(PYTHON_IMAGE):
            shutil.copy(HOST_CA_BUNDLE, context / "ca-certificates.crt")
            engine.docker("build", "--network", "host", "--build-arg", f"DEBIAN={DEBIAN_IMAGE}", "-t", PYTHON_IMAGE,
                          "-f", str(ROOT / "tests/docker/base/python.Dockerfile"), str(context))
        if not engine.has_image(TORCH_IMAGE):
            wheels = context / "wheels"
            subprocess.run(["python3", "-m", "pip", "download", "-q", "--no-deps", "-d", str(wheels), TORCH_WHEEL],
                           check=True, timeout=900)
            engine.docker("build", "--network", "host", "--build-arg", f"PYTHON={PYTHON_IMAGE}", "-t", TORCH_IMAGE,
                          "-f", str(ROOT / "tests/docker/base/torch.Dockerfile"), str(context))
    return {"python": PYTHON_IMAGE, "torch": TORCH_IMAGE}
