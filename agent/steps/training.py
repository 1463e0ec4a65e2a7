"""Training a commit through a runner: the hard timeout, one retry of a failure outside the
experiment (infra), the salvage of a run that died after its seal (agent/judging/salvage.py),
and the noise floor. A run that ends while the loop is stopping raises Stopping: what it printed
is not judged."""

from __future__ import annotations

import dataclasses
import statistics
import time
from concurrent.futures import ThreadPoolExecutor

from agent.judging.compute import over_compute
from agent.judging.noise import floored, inflated_floor, sigma_of
from agent.judging.salvage import SALVAGEABLE, salvage, salvageable
from agent.judging.verify import Untrusted, score_runs
from agent.recording.record import ExperimentRecord, ExperimentStatus, RunEntry, Timings, now
from agent.recording.transcript import Transcript
from agent.running.disk import short_of_room
from agent.running.runner import Runner, RunResult
from agent.settings import LoopSettings
from agent.steps.sharing import Shared
from agent.workspace import Workspace
from trainer.runs.jobs import Job
from trainer.runs.run_id import RunId, RunKind
from trainer.runs.triage import Triage, Verdict
from trainer.sandbox.seal import declared_batch_tokens
from trainer.tracks.spec import TrackConstants

# The hard timeout of a track whose budget the machine's load does not change (steps, FLOPs; CPU seconds in a cpu
# workspace made before that track counted FLOPs) only catches a hang: such a run takes longer on a busy machine
# and still trains the same. 2 x 10 x budget + grace (cpu: 1320 s, test: 220 s).
LOAD_BLIND_WALL_FACTOR = 10
COMPUTED = (Triage.OK, *SALVAGEABLE)  # runs that reached their seal: held to the compute they used


class LoopStopped(Exception):
    """The loop cannot go on (e.g. the machine failed twice); the message says why and what to do."""


def hard_timeout(constants: TrackConstants, settings: LoopSettings) -> float:
    """Wall-clock seconds after which a run of a track with these constants is killed: 2 x budget + grace."""
    budget = constants.time_budget * (LOAD_BLIND_WALL_FACTOR if constants.budget != "wall" else 1)
    return settings.timeout_seconds or 2 * budget + settings.grace_seconds


class Training:
    def __init__(self, workspace: Workspace, runner: Runner, settings: LoopSettings, shared: Shared):
        self.workspace, self.runner, self.settings, self.shared = workspace, runner, settings, shared

    def run(self, commit: str, run: RunId, seed: int, transcript: Transcript) -> RunResult:
        """One run of a commit; an infra failure is retried once, not charged. result.run says which run it was."""
        job = Job(run=run, commit=commit, seed=seed, timeout=hard_timeout(self.workspace.track.constants,
                                                                           self.settings))
        transcript.event("run_started", commit=commit, timeout_s=job.timeout, runner=self.runner.name, seed=seed)
        result = self._run(job)
        if result.verdict.triage == Triage.INFRA:
            transcript.event("retry", reason=result.verdict.reason, note="infra: same commit once more, not charged")
            result = self._run(job.model_copy(update={"run": run.then(RunKind.RETRY)}))
        if result.verdict.triage == Triage.INFRA:
            result = self._blamed(job, result, transcript)
        self.shared.check()
        result = self._held_to_compute(commit, result)
        if salvageable(result):  # died after its seal: judged on its sealed weights, before any fix or crash
            result = salvage(self.workspace, self.runner, commit, result, transcript)
        transcript.event("run_finished", seed=seed, returncode=result.returncode, timed_out=result.timed_out,
                         triage=result.verdict.triage.value, reason=result.verdict.reason,
                         salvaged=result.salvage is not None,
                         seconds=round(result.seconds, 3), summary=result.summary, log_tail=result.tail,
                         where=result.where)
        return result

    def _held_to_compute(self, commit: str, result: RunResult) -> RunResult:
        """over_budget where a run used more than the harness measured its budget costs on this machine."""
        if result.verdict.triage not in COMPUTED:
            return result
        with self.shared.lock:
            records = list(self.shared.ledger.records)
            if any(r.commit == commit and r.status == ExperimentStatus.KEEP for r in records):
                return result  # a kept commit's noise floor or control: its compute was judged at its keep
            declared = declared_batch_tokens(self.workspace.file_at("train.py", commit))
        if over := over_compute(result, records, self.workspace.track.constants, declared):
            return dataclasses.replace(result, verdict=Verdict(Triage.OVER_BUDGET, over, result.verdict.summary))
        return result

    def _run(self, job: Job) -> RunResult:
        self.shared.check()
        if short := short_of_room([self.workspace.dir, self.workspace.runs_dir]):
            raise LoopStopped(short)
        self.shared.checkpoints.use(job.run.experiment, self.workspace.paths(job.run).checkpoint)
        return dataclasses.replace(self.runner.run(self.workspace, job), run=job.run)

    def _blamed(self, job: Job, failed: RunResult, transcript: Transcript) -> RunResult:
        """A commit that failed twice as a broken machine fails (what its log says may be its own doing: a train.py
        can print "No space left on device") is put to the test: the best commit runs once on the same machine. If it
        runs fine, the failure is the experiment's own (fixable); if not, the machine's (infra: the loop stops)."""
        if (best := self.shared.ledger.head()) is None or best.commit == job.commit:
            return failed
        transcript.event("canary", commit=best.commit, reason=failed.verdict.reason)
        canary = self._run(job.model_copy(update={"run": job.run.then(RunKind.CANARY), "commit": best.commit}))
        transcript.event("canary_finished", triage=canary.verdict.triage.value, reason=canary.verdict.reason)
        if canary.verdict.triage != Triage.OK:
            return failed
        verdict = Verdict(Triage.FIXABLE, f"{failed.verdict.reason}; the best commit ran fine on the same machine "
                                          "right after, so the failure is the experiment's own", failed.verdict.summary)
        return dataclasses.replace(failed, verdict=verdict)

    def verified(self, commit: str, run: RunEntry, transcript: Transcript, what: str, say=print) -> None:
        """The run's number made the trusted evaluator's; a run whose number cannot stand drops out (tamper)."""
        try:
            score_runs(self.workspace, self.runner, commit, [run])
        except Untrusted as err:
            run.val_bpb, run.triage = None, Triage.TAMPER.value
            transcript.event("verification", passed=False, problem=str(err), seed=run.seed)
            say(f"warning: {what} (seed {run.seed}) is not counted: {err}")

    def noise_seeds(self) -> list[int]:
        """The seeds of the next noise floor, taken now so that runs started later get others."""
        return [self.shared.seed() for _ in range(self.settings.noise_seeds)]

    def measure_noise_floor(self, best: ExperimentRecord, seeds: list[int], say=print) -> ExperimentRecord:
        """Re-runs the best commit with the given seeds, all at once; sigma of all its runs is the noise floor
        from now on."""
        ledger, started, started_at = self.shared.ledger, time.monotonic(), now()
        record_id = f"{best.id}-noise"
        transcript = Transcript(self.workspace.dir / "transcripts" / f"{record_id}.jsonl")
        transcript.event("noise_floor_started", of=best.id, commit=best.commit, runs=len(seeds))
        noise_runs = [RunId.noise(best.id, number + 1) for number in range(len(seeds))]
        with ThreadPoolExecutor(max_workers=max(1, len(seeds)), thread_name_prefix=record_id) as pool:
            results = list(pool.map(lambda run, seed: self.run(best.commit, run, seed, transcript), noise_runs,
                                    seeds))
        runs = [RunEntry.of(result, seed, self.workspace.dir) for result, seed in zip(results, seeds, strict=True)]
        for result in results:
            if result.verdict.triage == Triage.INFRA:
                raise LoopStopped(f"measuring the noise floor failed twice for a reason outside the experiment: "
                                  f"{result.verdict.reason}. Fix the machine or the data, then run again")
        with ThreadPoolExecutor(max_workers=max(1, len(runs)), thread_name_prefix=f"{record_id}-verify") as pool:
            list(pool.map(lambda run: self.verified(best.commit, run, transcript, f"a noise run of {best.id}", say),
                          runs))  # side by side, as the runs trained
        with self.shared.lock:
            self.shared.check()
            values = ledger.history().runs_of(best.commit) + [r.val_bpb for r in runs if r.val_bpb is not None]
            sigma, too_low = floored(sigma_of(values), self.workspace.track.track)
            record = ExperimentRecord(
                id=record_id, status=ExperimentStatus.NOISE, triage="ok", of=best.id, parent=best.commit,
                commit=best.commit, description=f"noise floor: {best.id} re-run with seeds "
                                                + ", ".join(str(r.seed) for r in runs),
                val_bpb=statistics.fmean(values), runs=runs, values=values, sigma=sigma, peak_vram_mb=None,
                reason=too_low or "",
                timings=Timings(run_s=round(sum(r.seconds for r in runs), 3),
                                total_s=round(time.monotonic() - started, 3)),
                transcript=str(transcript.path.relative_to(self.workspace.dir)), started=started_at, finished=now())
            ledger.append(record)
            self.shared.checkpoints.release(best.id)
            ledger.prune_checkpoints(self.shared.checkpoints.in_use())
        transcript.event("noise_floor", of=best.id, values=values, sigma=sigma)
        say(f"{record_id} sigma {sigma:.6f} from {len(values)} runs of {best.id}" if sigma is not None
            else f"{record_id}: too few runs succeeded to measure sigma")
        for warning in (too_low, inflated_floor(sigma, self.workspace.track.track, self.settings.keep_sigmas)):
            if warning:
                say(f"warning: {warning}")
        return record
