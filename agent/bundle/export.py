"""`autoresearch export`: the best train.py, its patch against the baseline, and a bundle another person can check.

The bundle holds each keep's diff, the logs of its runs up to their seals and their seeds, every transcript, the
model ids as the service named them on every reply, what the night cost, the hardware and the tolerances: keys and
this machine's paths scrubbed from all of it. The sealed weights stay home; `autoresearch verify` re-trains instead.
"""

from __future__ import annotations

import os
import re
import shutil
import time
from collections import Counter
from pathlib import Path

from agent.bundle.manifest import BASELINE_TRAIN, BEST_TRAIN, MANIFEST, PATCH, Bundle, BundleKeep, BundleRun
from agent.recording.history import History
from agent.recording.record import ExperimentRecord
from agent.report.night import Night
from agent.workspace import PROJECT, Workspace
from trainer.prepare import cache_root

KEY_PATTERNS = (re.compile(r"sk-ant-[A-Za-z0-9_\-]{8,}"), re.compile(r"\bsk-[A-Za-z0-9_\-]{16,}"),
                re.compile(r"(?i)\bbearer\s+[A-Za-z0-9._\-]{8,}"))
SECRET_NAMES = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD)", re.IGNORECASE)
MIN_SECRET_CHARS = 8


class NothingToExport(Exception):
    pass


class Scrubber:
    """What must not leave the machine in a bundle: API keys and tokens, and the paths that name this machine's user
    and folders."""

    def __init__(self, places: dict[str, Path]):
        """places: a placeholder -> the folder it stands for (the workspace, the checkout, the home)."""
        self.secrets = sorted({value for name, value in os.environ.items()
                               if SECRET_NAMES.search(name) and len(value) >= MIN_SECRET_CHARS}, key=len, reverse=True)
        found = [(str(path.resolve()), placeholder) for placeholder, path in places.items()]
        found += [(str(path), placeholder) for placeholder, path in places.items()]
        self.paths = sorted(set(found), key=lambda pair: len(pair[0]), reverse=True)

    def __call__(self, text: str) -> str:
        for secret in self.secrets:
            text = text.replace(secret, "<secret>")
        for pattern in KEY_PATTERNS:
            text = pattern.sub("<secret>", text)
        for path, placeholder in self.paths:
            if len(path) > 1:
                text = text.replace(path, placeholder)
        return text


def write_bundle(workspace: Workspace, destination: Path) -> Bundle:
    """Writes the bundle into destination (a new folder) and returns its manifest."""
    night = Night(workspace)
    baseline, best = night.baseline, night.best
    if baseline is None or best is None or best.id == baseline.id:
        raise NothingToExport(f"{workspace.tag} has no keep beyond its baseline: there is nothing to take home")
    kept = History(night.records).kept()
    scrub = Scrubber({"<workspace>": workspace.dir, "<workspaces>": workspace.dir.parent, "<cache>": cache_root(),
                      "<runs>": workspace.runs_dir.parent, "<checkout>": PROJECT, "<home>": Path.home()})
    staging = destination.with_name(f".{destination.name}.writing")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    # the code as well: a key a proposer wrote into a comment goes no further; the patch, scrubbed alike, still applies
    (staging / BEST_TRAIN).write_text(scrub(workspace.file_at("train.py", best.commit)))
    (staging / BASELINE_TRAIN).write_text(scrub(workspace.file_at("train.py", baseline.commit)))
    (staging / PATCH).write_text(scrub(_patch(night.cumulative_diff)))
    for folder in ("keeps", "logs", "transcripts"):
        (staging / folder).mkdir()
    keeps = [_keep(record, workspace, staging, scrub) for record in kept[1:]]
    baseline_runs = [run for record in night.records if record.commit == baseline.commit
                     for run in _runs(record, workspace, staging, scrub)]  # its noise floor's and controls' too
    for record in night.records:
        if record.transcript and (workspace.dir / record.transcript).is_file():
            text = (workspace.dir / record.transcript).read_text(errors="replace")
            (staging / "transcripts" / f"{record.id}.jsonl").write_text(scrub(text))
    manifest = _manifest(workspace, night, baseline, best, keeps, baseline_runs, scrub)
    manifest = Bundle.model_validate_json(scrub(manifest.model_dump_json()))  # descriptions are a model's words
    (staging / MANIFEST).write_text(manifest.model_dump_json(indent=1))
    staging.rename(destination)
    return manifest


def _keep(record: ExperimentRecord, workspace: Workspace, staging: Path, scrub: Scrubber) -> BundleKeep:
    diff = f"keeps/{record.id}.diff"
    (staging / diff).write_text(scrub(_patch(record.diff)))
    return BundleKeep(id=record.id, description=record.description, gain=record.evidence.gain,
                      implausible_fall=record.evidence.implausible_fall, diff=diff,
                      runs=_runs(record, workspace, staging, scrub))


def _runs(record: ExperimentRecord, workspace: Workspace, staging: Path, scrub: Scrubber) -> list[BundleRun]:
    """The record's runs, each with what it printed up to its seal (a record without the mark: none of it)."""
    runs = []
    for n, run in enumerate(record.runs):
        log = None
        if run.log and run.log_shown_bytes:
            path = workspace.dir / "logs" / Path(run.log).name
            if path.is_file():
                with open(path, "rb") as handle:
                    head = handle.read(run.log_shown_bytes).decode("utf-8", errors="replace")
                log = f"logs/{record.id}-{n}.log"
                (staging / log).write_text(scrub(head))
        runs.append(BundleRun(seed=run.seed, val_bpb=run.val_bpb, trusted=run.trusted, holdout_bpb=run.holdout_bpb,
                              log=log))
    return runs


def _patch(diff: str) -> str:
    """git's output less the newline GitPython strips from its end, without which git apply calls it corrupt."""
    return diff if not diff or diff.endswith("\n") else diff + "\n"


def _manifest(workspace: Workspace, night: Night, baseline: ExperimentRecord, best: ExperimentRecord,
              keeps: list[BundleKeep], baseline_runs: list[BundleRun], scrub: Scrubber) -> Bundle:
    models = Counter(scrub(str(event["service_model"]))[:200] for events in night.events.values() for event in events
                     if event.get("service_model"))
    h = night.headline
    return Bundle(tag=workspace.tag, track=night.track.track, data=str(night.track.fingerprint),
                  frozen=workspace.frozen_hashes(), baseline_id=baseline.id, best_id=best.id,
                  baseline_val_bpb=h.baseline, best_val_bpb=h.best, gain=h.gain, baseline_runs=baseline_runs,
                  confirmation=night.confirmation,
                  keeps=keeps, models=dict(models), llm_usd=h.cost_usd, device_hours=h.gpu_hours, device=h.device,
                  hardware=[scrub(line) for line in h.hardware],
                  tolerances=night.tolerances.words() if night.tolerances else None,
                  keep_rule=night.keep_rule.words(), exported=time.strftime("%Y-%m-%dT%H:%M:%S%z"))
