"""The runners, by name: `run` takes the one whose option is given (--spool DIR, --ray-address HOST:PORT), else
the local one.

A new runner is a module of agent/running/ with a class that provides the Runner protocol
(agent/running/runner.py: name, isolation, slots, run, cancel_all, evaluate) and one entry in RUNNERS
below: a factory that builds it from RunnerOptions. Factories import their module when called, so that
an optional dependency (ray) is needed only by the runner that uses it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agent.running.runner import Runner


class RunnerUnavailable(Exception):
    """The runner cannot start as asked; the message says why and what to do."""


@dataclass(frozen=True)
class RunnerOptions:
    parallel: int | None = None
    spool: Path | None = None
    ray_address: str | None = None


@dataclass(frozen=True)
class RunnerChoice:
    make: Callable[[RunnerOptions], Runner]  # raises RunnerUnavailable
    summary: str                             # what it is
    needs: str | None = None                 # the RunnerOptions field only it takes: giving it chooses it


def _local(options: RunnerOptions) -> Runner:
    from agent.running.runner import LocalRunner
    try:
        return LocalRunner(slots=options.parallel)
    except ValueError as err:
        raise RunnerUnavailable(str(err)) from err


def _spool(options: RunnerOptions) -> Runner:
    from agent.running.spool_runner import SpoolRunner
    return SpoolRunner(options.spool)


def _ray(options: RunnerOptions) -> Runner:
    from agent.running.ray_runner import RayRunner, RayUnavailable
    try:
        return RayRunner(options.ray_address)
    except RayUnavailable as err:
        raise RunnerUnavailable(str(err)) from err


RUNNERS: dict[str, RunnerChoice] = {
    "local": RunnerChoice(_local, "a subprocess here"),
    "spool": RunnerChoice(_spool, "trainer workers", "spool"),
    "ray": RunnerChoice(_ray, "a Ray cluster", "ray_address"),
}


def implied_runner(options: RunnerOptions) -> str:
    """The runner whose needed option is given (the last registered of several, so --ray-address wins over
    --spool), else the local one."""
    given = [name for name, choice in RUNNERS.items()
             if choice.needs and getattr(options, choice.needs) is not None]
    return given[-1] if given else "local"


def listed(items: list[str], last_joint: str) -> str:
    """Choices as a sentence lists them: a, b or c."""
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + last_joint + items[-1]
