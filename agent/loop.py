"""The experiment loop: propose -> validate -> commit -> run -> triage -> keep or reset -> record.

One call of run_loop holds the workspace lock, first settles an experiment that a dead loop
left in flight, runs the unmodified baseline if the ledger is empty, then runs experiments
until a limit is reached. Every experiment ends with the branch head at the best commit,
a clean tree, one ledger row and a transcript.
"""

from __future__ import annotations

import hashlib
import os
import statistics
import threading
import time
from concurrent.futures import Future
from concurrent.futures import wait as futures_wait
from dataclasses import dataclass
from pathlib import Path

from agent.decisions import as_float, decide, implausible_fall, prune_checkpoints, run_entry, verified
from agent.edits import EditRejected, apply_edits
from agent.ledger import NOISE, Ledger
from agent.llm.types import ProviderFatal, ProviderUnavailable
from agent.night_facts import NightFacts, night_facts
from agent.noise import Judgement, commit_runs, fresh_seed, sigma_of, wants_noise_floor
from agent.notes import record_with_keep
from agent.policy import check_policy
from agent.proposal_failures import FailedProposal, failures_cost, record_failure
from agent.proposers.base import Proposal, ProposalContext, Proposer, ProposerError
from agent.recovery import record_interrupted, settle_interrupted
from agent.runner import Runner, RunResult
from agent.simplify import simplify_or_discard
from agent.transcript import Transcript
from agent.triage import Triage
from agent.untrusted import bounded
from agent.workspace import Workspace
from trainer.prepare import SEAL_FD_VAR

MAX_CONSECUTIVE_PROPOSER_FAILURES = 5


@dataclass
class LoopSettings:
    max_experiments: int | None = None   # experiments this call may run (the baseline counts)
    max_hours: float | None = None       # no new experiment starts after this
    min_delta: float = 0.0               # keep only if val_bpb < best - min_delta
    grace_seconds: float = 120.0         # hard timeout = 2 x budget + grace
    timeout_seconds: float | None = None  # overrides the hard timeout
    max_fix_attempts: int = 2            # fixes a proposer may submit for a fixable crash
    max_cost_usd: float | None = None    # stop once the run's LLM spend reaches this
    outage_poll_seconds: float = 60.0    # while the LLM provider is down, try again this often
    overlap: bool = True                 # propose the next experiment while this one trains
    seed: int = 42                       # the baseline's; every later run gets a seed not used before
    noise_seeds: int = 2                 # re-runs of the best that measure sigma (0: no noise floor)
    noise_every_keeps: int = 5           # measure the noise floor again after this many keeps
    keep_sigmas: float = 2.0             # a gain must exceed this many sigma (standard errors after re-runs)


class LoopStopped(Exception):
    """The loop cannot go on (e.g. the machine failed twice); the message says why and what to do."""


def run_loop(workspace: Workspace, proposer: Proposer, runner: Runner, settings: LoopSettings,
             say=print) -> str:
    """Runs experiments until a limit; returns why it stopped."""
    ledger = Ledger(workspace.dir)
    for message in ledger.set_aside:
        say(message)
    if SEAL_FD_VAR not in workspace.file_at("prepare.py", workspace.root_commit()):
        raise LoopStopped(f"workspace {workspace.dir} was created by a version whose frozen prepare.py predates "
                          "the validation seal, so its runs could not read val; start a new --tag (the old "
                          "one's results stay readable by `report` and `status`)")
    with workspace.lock():
        say(runner.isolation)
        settle_interrupted(workspace, ledger, say)
        started, done, failures = time.monotonic(), 0, 0
        ahead: Ahead | None = None  # the next proposal, made while the current experiment trains
        while True:
            why = None
            if settings.max_experiments is not None and done >= settings.max_experiments:
                why = f"ran {done} experiment(s), the limit for this run"
            elif settings.max_hours is not None and time.monotonic() - started >= settings.max_hours * 3600:
                why = f"reached the {settings.max_hours} h limit"
            elif settings.max_cost_usd is not None and run_cost(ledger) >= settings.max_cost_usd:
                why = f"reached the cost cap of ${settings.max_cost_usd:.2f} (spent ${run_cost(ledger):.2f})"
            if why is not None:
                abandon(ahead, why, workspace.dir)  # a proposal made ahead is paid for even if never run
                return why
            if wants_noise_floor(ledger.records, settings.noise_seeds, settings.noise_every_keeps):
                measure_noise_floor(workspace, ledger, runner, settings, say)
            last = settings.max_experiments is not None and done + 1 >= settings.max_experiments
            facts = night_facts(settings.max_experiments, done, settings.max_hours,
                                (time.monotonic() - started) / 3600, settings.max_cost_usd, run_cost(ledger),
                                settings.keep_sigmas, settings.noise_seeds, settings.min_delta)
            try:
                record, ahead = run_experiment(workspace, ledger, proposer, runner, settings, ahead,
                                               look_ahead=settings.overlap and not last, facts=facts)
            except (ProposerError, EditRejected) as err:
                ahead = None
                failures += 1
                record_failure(workspace.dir, FailedProposal(
                    experiment_id=ledger.next_id(), kind="failed", reason=str(err), in_a_row=failures,
                    usage=getattr(err, "usage", {})))
                say(f"proposal failed ({failures} in a row): {err}")
                if failures >= MAX_CONSECUTIVE_PROPOSER_FAILURES:
                    raise LoopStopped(f"the proposer failed {failures} times in a row; last error: {err}") from err
                continue
            except ProviderUnavailable as err:
                ahead = None
                say(f"paused: {err}; nothing was charged, trying again in {settings.outage_poll_seconds:.0f} s")
                time.sleep(settings.outage_poll_seconds)
                continue
            except ProviderFatal as err:
                raise LoopStopped(str(err)) from err
            failures, done = 0, done + 1
            say(f"{record['id']} {record['status']:<8} {_bpb(record)}  {record['description']}"
                + (f"  (${record['llm']['cost_usd']:.4f})" if record["llm"].get("cost_usd") else ""))


def run_experiment(workspace: Workspace, ledger: Ledger, proposer: Proposer, runner: Runner,
                   settings: LoopSettings, ahead: Ahead | None = None,
                   look_ahead: bool = False, facts: NightFacts | None = None) -> tuple[dict, Ahead | None]:
    """One experiment, and the proposal for the next one if look_ahead (made while this one trains)."""
    experiment_id = ledger.next_id()
    transcript = Transcript(workspace.dir / "transcripts" / f"{experiment_id}.jsonl")
    best, parent = ledger.best(), workspace.head()
    program = read_program(workspace)
    t_start = time.monotonic()

    facts = facts or NightFacts(keep_sigmas=settings.keep_sigmas, noise_seeds=settings.noise_seeds,
                                min_delta=settings.min_delta)
    got = obtain_proposal(workspace, ledger, proposer, experiment_id, best, program, transcript, ahead, facts)
    proposal, source = got.proposal, got.source
    description = bounded(proposal.description)
    commit = parent if best is None else workspace.commit_train(source, f"{experiment_id}: {description}")
    transcript.event("committed", commit=commit, parent=parent,
                     diff="" if best is None else workspace.diff(parent, commit))
    # The baseline runs with the base seed; every later run with a seed no run of this tag used, so that
    # no experiment is compared on a seed that is systematically luckier or unluckier than the mean.
    seed = settings.seed if best is None else fresh_seed(ledger.records, settings.seed)
    in_flight = dict(id=experiment_id, commit=commit, parent=parent, description=description,
                     started=_now(), pid=os.getpid(), proposal=proposal.meta, program=program["name"], seed=seed)
    ledger.begin(in_flight)
    spent = run_cost(ledger) + proposal.usage.get("cost_usd", 0.0)
    if settings.max_cost_usd is not None and spent >= settings.max_cost_usd:
        look_ahead = False  # this is the last experiment the budget pays for
    next_ahead = look_ahead_proposal(workspace, ledger, proposer, best, parent, in_flight, facts.after_one()) \
        if look_ahead and best is not None else None
    try:
        trained = train_with_fixes(workspace, ledger, proposer, runner, settings, in_flight, source,
                                   can_fix=best is not None, transcript=transcript)
    except KeyboardInterrupt:
        record_interrupted(workspace, ledger, in_flight, best, transcript)
        abandon(next_ahead, "the loop was interrupted", workspace.dir)
        raise

    result = trained.result
    runs = [run_entry(workspace, result, seed)]
    judgement = decide(result, best, ledger.records, runs, settings.keep_sigmas, settings.min_delta)

    def train_again(why: str) -> Judgement:
        rerun_seed = fresh_seed([*ledger.records, dict(runs=runs)], settings.seed)
        transcript.event("rerun", seed=rerun_seed, reason=why)
        again = run_with_infra_retry(workspace, runner, trained.commit, f"{experiment_id}.rerun{len(runs)}",
                                     rerun_seed, settings, transcript)
        runs.append(run_entry(workspace, again, rerun_seed))
        trained.run_seconds += again.seconds
        verdict = decide(again, best, ledger.records, runs, settings.keep_sigmas, settings.min_delta)
        if verdict.status == "crash":
            return Judgement("discard", f"the re-run crashed ({verdict.reason}): the gain did not reproduce",
                             dict(candidate_runs=[r["val_bpb"] for r in runs]))
        return verdict

    # A fall too large for one change is never kept on one number: trained again from scratch, flagged.
    suspicion = implausible_fall(runs, best) if judgement.status == "keep" else None
    if suspicion:
        judgement = train_again(suspicion)
    while judgement.status == "close":
        judgement = train_again(judgement.reason)
    if best is not None:
        judgement = simplify_or_discard(judgement, workspace.file_at("train.py", parent),
                                        workspace.file_at("train.py", trained.commit), runs, best, ledger.records)
    if suspicion:
        judgement.evidence["implausible_fall"] = suspicion
        judgement.reason += f"; flagged: {suspicion}, so it was trained again from scratch"
    if judgement.status == "keep" and best is not None:
        judgement = verified(workspace, runner, trained.commit, runs, judgement, transcript)
    status, reason = judgement.status, judgement.reason
    measured = [r["val_bpb"] for r in runs if r["val_bpb"] is not None]
    diff = "" if best is None else workspace.diff(parent, trained.commit)
    if status != "keep":
        workspace.reset_to(parent)
    else:
        record_with_keep(workspace.repo, trained.commit, workspace.dir)
    record = dict(
        id=experiment_id, parent=parent, commit=trained.commit, status=status,
        triage=judgement.triage or result.verdict.triage.value, verified=status == "keep" and best is not None,
        reason=reason, description=description,
        val_bpb=statistics.fmean(measured) if measured and status != "crash" else None,
        runs=runs, evidence=judgement.evidence,
        checkpoint=str(result.checkpoint.relative_to(workspace.dir)) if status == "keep" and result.checkpoint
        else None,
        peak_vram_mb=as_float(result.summary.get("peak_vram_mb")), summary=result.summary,
        model_config=result.model_config,
        returncode=result.returncode, timed_out=result.timed_out, frozen_changed=result.frozen_changed,
        proposed_against=got.base_commit, rebased=got.rebased,
        timings=_timings(got, trained, time.monotonic() - t_start),
        proposer=proposal.meta.get("proposer", proposer.name) if best is not None else "baseline",
        proposal=proposal.meta, **proposal.research_fields(), fix_attempts=trained.attempts,
        llm=_sum_usage(proposal.usage, *trained.fix_usage),
        program=dict(name=program["name"], sha256=program["sha256"]), diff=diff,
        log=str(result.log_path.relative_to(workspace.dir)), log_tail=result.tail if status == "crash" else "",
        transcript=str(transcript.path.relative_to(workspace.dir)), started=in_flight["started"], finished=_now())
    ledger.append(record)
    ledger.finish()
    prune_checkpoints(workspace, ledger.records)
    transcript.event("decision", status=status, triage=record["triage"], reason=reason, val_bpb=record["val_bpb"],
                     best_before=best["val_bpb"] if best else None, runs=runs, evidence=judgement.evidence)
    if next_ahead is not None:
        futures_wait([next_ahead.future])  # proposers are told and asked from one thread at a time
    if best is not None:
        proposer.observe(record)
    if result.verdict.triage == Triage.INFRA:
        abandon(next_ahead, "the loop stopped on an infra failure", workspace.dir)
        raise LoopStopped(f"experiment {experiment_id} failed twice for a reason outside the experiment: "
                          f"{result.verdict.reason}. Fix the machine or the data (see {record['log']}), then run "
                          "again: the loop resumes from the best commit")
    if best is None and status != "keep":
        raise LoopStopped(f"the baseline did not produce a result ({record['triage']}: {reason}); see "
                          f"{record['log']}")
    return record, next_ahead


@dataclass
class Ahead:
    """A proposal being made in the background for the next experiment."""
    experiment_id: str
    base_commit: str
    future: Future
    transcript: Transcript


@dataclass
class Obtained:
    proposal: Proposal
    source: str
    base_commit: str | None
    rebased: bool = False
    propose_seconds: float = 0.0   # how long the proposer worked on it
    wait_seconds: float = 0.0      # how long the loop waited for it (the critical path)


def obtain_proposal(workspace: Workspace, ledger: Ledger, proposer: Proposer, experiment_id: str, best: dict | None,
                    program: dict, transcript: Transcript, ahead: Ahead | None,
                    facts: NightFacts | None = None) -> Obtained:
    """The baseline; or the proposal made ahead, re-applied to the best if the best moved; or a fresh one."""
    if best is None:
        transcript.event("proposal", proposer="baseline", description="baseline: train.py as created", edits=[])
        return Obtained(Proposal("baseline", []), workspace.file_at("train.py"), None)
    if ahead is not None and ahead.experiment_id == experiment_id:
        waited = time.monotonic()
        proposal, seconds = ahead.future.result()  # its errors count against this experiment, as a serial one's would
        waited = time.monotonic() - waited
        if ahead.base_commit == best["commit"]:
            return Obtained(proposal, apply_edits(workspace.file_at("train.py"), proposal.edits), best["commit"],
                            propose_seconds=seconds, wait_seconds=waited)
        try:
            source = apply_edits(workspace.file_at("train.py"), proposal.edits)
            check_policy(source, parent=workspace.file_at("train.py"))
            transcript.event("rebased", onto=best["commit"], proposed_against=ahead.base_commit)
            return Obtained(proposal, source, ahead.base_commit, True, seconds, waited)
        except EditRejected as err:
            transcript.event("rebase_failed", onto=best["commit"], message=str(err))
            record_failure(workspace.dir, FailedProposal(experiment_id=experiment_id, kind="rejected",
                                                         reason=f"no longer applies to the best: {err}",
                                                         usage=proposal.usage))
            proposer.observe(dict(id=experiment_id, status="rejected", proposal=proposal.meta))
    started = time.monotonic()
    context = proposal_context(workspace, ledger, experiment_id, best, program, workspace.file_at("train.py"),
                               facts=facts)
    transcript.event("proposal_started", proposer=proposer.name, parent=best["commit"], program=program["name"],
                     program_sha256=program["sha256"])
    proposal, seconds = propose_validated(proposer, context, transcript)
    return Obtained(proposal, apply_edits(context.train_source, proposal.edits), best["commit"],
                    propose_seconds=seconds, wait_seconds=time.monotonic() - started)


def proposal_context(workspace: Workspace, ledger: Ledger, experiment_id: str, best: dict, program: dict,
                     train_source: str, running: dict | None = None,
                     facts: NightFacts | None = None) -> ProposalContext:
    return ProposalContext(track=workspace.track, program_name=program["name"], program_text=program["text"],
                           train_source=train_source, best=best, history=list(ledger.records),
                           experiment_id=experiment_id, running=running, facts=facts or NightFacts())


def propose_validated(proposer: Proposer, context: ProposalContext, transcript: Transcript) -> tuple[Proposal, float]:
    """A proposal whose edits apply to context.train_source and pass the policy, and the seconds it took."""
    started = time.monotonic()
    proposal = proposer.propose(context, transcript)
    transcript.event("proposal", proposer=proposer.name, description=proposal.description,
                     edits=[vars(e) for e in proposal.edits], meta=proposal.meta, **proposal.research_fields())
    try:
        check_policy(apply_edits(context.train_source, proposal.edits), parent=context.train_source)
    except EditRejected as err:
        transcript.event("edit_rejected", message=str(err))
        proposer.observe(dict(id=context.experiment_id, status="rejected", proposal=proposal.meta))
        raise
    return proposal, time.monotonic() - started


def look_ahead_proposal(workspace: Workspace, ledger: Ledger, proposer: Proposer, best: dict, parent: str,
                        running: dict, facts: NightFacts | None = None) -> Ahead:
    """Starts proposing the next experiment against the current best while `running` trains."""
    experiment_id = f"{int(running['id']) + 1:04d}"
    program = read_program(workspace)
    context = proposal_context(workspace, ledger, experiment_id, best, program, workspace.file_at("train.py", parent),
                               running=dict(id=running["id"], description=running["description"],
                                            proposer=running["proposal"].get("proposer")), facts=facts)
    transcript = Transcript(workspace.dir / "transcripts" / f"{experiment_id}.jsonl")
    transcript.event("proposal_started", proposer=proposer.name, parent=parent, program=program["name"],
                     program_sha256=program["sha256"], while_running=running["id"])
    future: Future = Future()

    def work() -> None:
        try:
            future.set_result(propose_validated(proposer, context, transcript))
        except BaseException as err:  # handed to the loop with the result
            future.set_exception(err)

    threading.Thread(target=work, name=f"propose-{experiment_id}", daemon=True).start()
    return Ahead(experiment_id, parent, future, transcript)


def abandon(ahead: Ahead | None, why: str, workspace_dir: Path | None = None) -> None:
    if ahead is None:
        return
    ahead.transcript.event("proposal_abandoned", reason=why)
    done = ahead.future.done() and ahead.future.exception() is None
    if workspace_dir is not None and done:
        proposal, _ = ahead.future.result()
        record_failure(workspace_dir, FailedProposal(experiment_id=ahead.experiment_id, kind="abandoned",
                                                     reason=why, usage=proposal.usage))


@dataclass
class Trained:
    result: RunResult
    commit: str
    attempts: list[dict]
    fix_usage: list[dict]
    run_seconds: float


def train_with_fixes(workspace: Workspace, ledger: Ledger, proposer: Proposer, runner: Runner,
                     settings: LoopSettings, in_flight: dict, source: str, can_fix: bool,
                     transcript: Transcript) -> Trained:
    """Runs the commit; after a fixable crash the proposer may submit fixes on top of it, each trained in turn."""
    experiment_id, commit = in_flight["id"], in_flight["commit"]
    result = run_with_infra_retry(workspace, runner, commit, experiment_id, in_flight["seed"], settings, transcript)
    trained = Trained(result, commit, [], [], result.seconds)
    while (result.verdict.triage == Triage.FIXABLE and can_fix and hasattr(proposer, "fix")
           and len(trained.attempts) < settings.max_fix_attempts):
        trained.attempts.append(dict(commit=commit, triage=result.verdict.triage.value, reason=result.verdict.reason,
                                     log=str(result.log_path.relative_to(workspace.dir))))
        crashed = dict(id=experiment_id, triage=result.verdict.triage.value, reason=result.verdict.reason,
                       log_tail=result.tail, proposer=in_flight["proposal"].get("proposer"))
        try:
            fix = proposer.fix(crashed, source, transcript)
            source, fixed_from = apply_edits(source, fix.edits), source
            check_policy(source, parent=fixed_from)
        except (ProposerError, EditRejected, ProviderUnavailable, ProviderFatal) as err:
            transcript.event("fix_failed", reason=str(err))  # the crash stands; a dead provider stops the next turn
            trained.fix_usage.append(getattr(err, "usage", None) or {})  # its spend counts all the same
            break
        number = len(trained.attempts)
        trained.fix_usage.append(fix.usage)
        message = f"{experiment_id}: fix {number}: {bounded(fix.description)}"
        previous, commit = commit, workspace.commit_train(source, message)
        transcript.event("committed", commit=commit, parent=previous, fix=number, diff=workspace.diff(previous, commit))
        in_flight["commit"] = commit
        ledger.begin(in_flight)
        result = run_with_infra_retry(workspace, runner, commit, f"{experiment_id}.fix{number}", in_flight["seed"],
                                      settings, transcript)
        trained.result, trained.commit = result, commit
        trained.run_seconds += result.seconds
    return trained


def _timings(got: Obtained, trained: Trained, total: float) -> dict:
    """Seconds: proposing, waiting for the proposal, training (runner), everything else the agent did."""
    return dict(propose_s=round(got.propose_seconds, 3), wait_s=round(got.wait_seconds, 3),
                run_s=round(trained.run_seconds, 3),
                agent_s=round(max(0.0, total - got.wait_seconds - trained.run_seconds), 3), total_s=round(total, 3))


def run_cost(ledger: Ledger) -> float:
    """LLM spend of the run: its experiments' and that of proposals that produced none."""
    return (sum((r.get("llm") or {}).get("cost_usd", 0.0) for r in ledger.records)
            + failures_cost(ledger.jsonl.parent))


def _sum_usage(*usages: dict) -> dict:
    total: dict = {}
    for usage in usages:
        for key, value in usage.items():
            total[key] = total.get(key, 0) + value
    return total


def run_with_infra_retry(workspace: Workspace, runner: Runner, commit: str, experiment_id: str, seed: int,
                         settings: LoopSettings, transcript: Transcript) -> RunResult:
    budget = workspace.track["constants"]["time_budget"]
    timeout = settings.timeout_seconds or 2 * budget + settings.grace_seconds
    transcript.event("run_started", commit=commit, timeout_s=timeout, runner=runner.name, seed=seed)
    result = runner.run(workspace, commit, timeout, experiment_id, seed)
    if result.verdict.triage == Triage.INFRA:
        transcript.event("retry", reason=result.verdict.reason, note="infra: same commit once more, not charged")
        result = runner.run(workspace, commit, timeout, f"{experiment_id}.retry", seed)
    transcript.event("run_finished", returncode=result.returncode, timed_out=result.timed_out,
                     triage=result.verdict.triage.value, reason=result.verdict.reason, seconds=round(result.seconds, 3),
                     summary=result.summary, log_tail=result.tail)
    return result


def measure_noise_floor(workspace: Workspace, ledger: Ledger, runner: Runner, settings: LoopSettings,
                        say=print) -> dict:
    """Re-runs the best commit with fresh seeds; sigma of all its runs is the noise floor from now on."""
    best, started, started_at = ledger.best(), time.monotonic(), _now()
    record_id = f"{best['id']}-noise"
    transcript = Transcript(workspace.dir / "transcripts" / f"{record_id}.jsonl")
    transcript.event("noise_floor_started", of=best["id"], commit=best["commit"], runs=settings.noise_seeds)
    first_seed, runs = fresh_seed(ledger.records, settings.seed), []
    for number in range(settings.noise_seeds):
        result = run_with_infra_retry(workspace, runner, best["commit"], f"{record_id}{number + 1}",
                                      first_seed + number, settings, transcript)
        runs.append(run_entry(workspace, result, first_seed + number))
        if result.verdict.triage == Triage.INFRA:
            raise LoopStopped(f"measuring the noise floor failed twice for a reason outside the experiment: "
                              f"{result.verdict.reason}. Fix the machine or the data, then run again")
    values = commit_runs(ledger.records, best["commit"]) + [r["val_bpb"] for r in runs if r["val_bpb"] is not None]
    sigma = sigma_of(values)
    record = dict(id=record_id, status=NOISE, triage="ok", of=best["id"], parent=best["commit"], commit=best["commit"],
                  description=f"noise floor: {best['id']} re-run with seeds "
                              + ", ".join(str(r["seed"]) for r in runs),
                  val_bpb=statistics.fmean(values), runs=runs, values=values, sigma=sigma, peak_vram_mb=None,
                  timings=dict(run_s=round(sum(r["seconds"] for r in runs), 3),
                               total_s=round(time.monotonic() - started, 3)),
                  transcript=str(transcript.path.relative_to(workspace.dir)), started=started_at, finished=_now())
    ledger.append(record)
    prune_checkpoints(workspace, ledger.records)
    transcript.event("noise_floor", of=best["id"], values=values, sigma=sigma)
    say(f"{record_id} sigma {sigma:.6f} from {len(values)} runs of {best['id']}" if sigma is not None
        else f"{record_id}: too few runs succeeded to measure sigma")
    return record


def read_program(workspace: Workspace) -> dict:
    """The research program, re-read before every experiment so that swapping it takes effect."""
    path = Path(workspace.settings["program"])
    text = path.read_text() if path.exists() else ""
    return dict(name=path.stem, path=str(path), text=text, sha256=hashlib.sha256(text.encode()).hexdigest())


def _bpb(record: dict) -> str:
    return f"{record['val_bpb']:.6f}" if record.get("val_bpb") is not None else "    -   "


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")
