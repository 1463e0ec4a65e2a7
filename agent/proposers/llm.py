"""The LLM proposer: one fresh tool-calling conversation per experiment.

System prompt = the research program + the service's fixed rules. First user message = train.py at
the best commit, then the state of the run. The model reads with the read-only tools and ends its turn
with a valid submit_experiment. Every tool call is validated against its argument model; a malformed
call or an invalid submission comes back as a tool error (at most MAX_REFLECTIONS invalid submissions),
and so does a change another experiment has claimed, or in hybrid (ProposalContext.code_only) one that
only changes UPPER_CASE values. Each tool result tells the model how many calls are left; the proposal
fails at max_tool_calls calls or past its token budget. A refused request or a refusal by the model fails
the proposal, and so does anything else that goes wrong inside it: the spend goes with the ProposerError,
and the night goes on. Every request, reply, thought, tool call and result goes to the transcript as it
happens.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from agent.llm.pricing import PriceTable
from agent.llm.rate_limits import RateLimiter
from agent.llm.retry import call_with_retries
from agent.llm.tools import SUBMIT, TOOLS, BadToolCall, parse_arguments
from agent.llm.types import (
    AssistantTurn,
    ContextTooLong,
    Conversation,
    ProviderFatal,
    ProviderUnavailable,
    RequestRefused,
    ToolCall,
    ToolResult,
    Usage,
)
from agent.proposers.base import Crashed, Proposal, ProposalContext, ProposerError
from agent.proposers.edits import Edit, EditRejected
from agent.proposers.logview import prompt_tail
from agent.proposers.night_facts import NightFacts
from agent.proposers.policy import checked_source
from agent.proposers.state.message import LOG_TAIL_LINES, state_message
from agent.proposers.toolbox import ToolBox, frozen_files
from agent.recording.notes import NOTES_LIMIT, read_notes
from agent.recording.novelty import HYPERPARAMETER, changed_settings, novelty
from agent.recording.record import ExperimentRecord
from agent.recording.research_memory import lesson_due
from agent.recording.transcript import Transcript

MAX_REFLECTIONS = 3
CUT_SHORT = {"max_tokens", "max_output_tokens", "length"}        # the reply hit its output limit
REFUSED = {"refusal", "content_filter"}                           # the model (or its filter) declined
CONTEXT_FULL = {"model_context_window_exceeded"}                  # the reply hit the context window
LESSON_NOT_GIVEN = "(not given)"
LESSON_REMINDER = "the lesson of experiment"

RULES = """\
## Fixed rules of this service
- You may change only train.py, through submit_experiment: search/replace edits, each old_string copied
  exactly from train.py and matching one place. prepare.py and track.json are frozen and hash-checked.
- One idea per experiment. It is committed, trained for the track's fixed budget (seconds, steps or FLOPs: its
  constants say which), and judged by val_bpb (validation bits per byte, from prepare.evaluate_bpb; lower is
  better) against the best so far:
  {keep_rule}. Otherwise the branch is reset to the best commit. The seed is the harness's; an edit that
  changes the seeding is rejected.
- Simplification wins too: a change that removes net lines of code from train.py and whose mean val_bpb is
  not worse than the best's by more than one standard error of the difference is kept as `simplify`, as
  long as the best never ends more than one sigma above the best mean ever reached.
- A sandbox policy rejects edits that import network or process modules, run dynamic code, touch the
  validation or holdout data, write outside the run directory, or redefine anything imported from
  prepare.py. Faking the metric is pointless: only a better model can win.
- Every submission states its hypothesis (why it should help) and what you expect (e.g. "val_bpb -0.003,
  step time +5%"); when the state names an experiment whose lesson is due, say what its result taught in
  `lesson`. write_notes replaces notes.md, your research notes ({notes_limit} bytes at most), which every
  later conversation sees.
- Read with read_file, list_experiments, read_run_log and show_diff; then call submit_experiment, which
  ends your turn. You have at most {max_tool_calls} tool calls."""


CODE_ONLY_RULE = """\
- In this run Optuna tunes the hyperparameter values (the UPPER_CASE constants of train.py) and re-tunes them
  after every keep. Your part is the code: propose changes to the architecture, the optimizer, the schedule or
  the data path, never a lone hyperparameter value; a submission that only changes UPPER_CASE values is
  refused."""


def system_prompt(program_text: str, max_tool_calls: int, facts: NightFacts | None = None,
                  code_only: bool = False) -> str:
    rules = RULES.format(max_tool_calls=max_tool_calls, keep_rule=(facts or NightFacts()).keep_rule.words(),
                         notes_limit=NOTES_LIMIT)
    if code_only:
        rules += "\n" + CODE_ONLY_RULE
    return f"{program_text.strip()}\n\n{rules}\n"


def values_only_refusal(base_source: str, source: str) -> str | None:
    """Why a code-only proposal is refused when it changes no code; None when it changes code."""
    if novelty(base_source, source) != HYPERPARAMETER:
        return None
    names = changed_settings(base_source, source)
    what = f"only sets {', '.join(names)}" if names else "changes no code (comments or layout at most)"
    return (f"refused, nothing was committed: this change {what}. In this run Optuna tunes the hyperparameter "
            "values; propose a change to the code (architecture, optimizer, schedule, data path) instead")


@dataclass
class ProposalSession:
    """One proposal's conversation: its tools, the train.py its edits apply to, what it is asked and held to, and
    what it has used so far (usage is the caller's, to see the spend while it grows)."""
    conversation: Conversation
    toolbox: ToolBox
    base_source: str
    transcript: Transcript
    lesson_for: str | None = None
    claim: Callable[[str, list[Edit]], str | None] = lambda source, edits: None
    usage: Usage = field(default_factory=Usage)
    code_only: bool = False
    calls: int = 0
    reflections: int = 0    # submissions refused, each answered with why
    reminded: bool = False  # told once that a lesson is due: the next submission may leave it out


class LLMProposer:
    name = "llm"

    def __init__(self, open_conversation: Callable[[], Conversation], workspace_dir: Path, prices: PriceTable,
                 max_tool_calls: int = 20, outage_window_s: float = 1800.0, retry_base_s: float = 1.0,
                 max_proposal_tokens: int = 3_000_000, algorithmic_share: float = 0.5):
        if not 0.0 <= algorithmic_share <= 1.0:
            raise ValueError(f"the algorithmic share must be between 0 and 1, got {algorithmic_share}")
        self.open_conversation = open_conversation
        self.algorithmic_share = algorithmic_share  # of code changes among its recent experiments, asked for
        self.workspace_dir, self.prices, self.max_tool_calls = workspace_dir, prices, max_tool_calls
        self.max_proposal_tokens = max_proposal_tokens  # input + output tokens of one proposal, all calls
        self.outage_window_s, self.retry_base_s = outage_window_s, retry_base_s
        self.limits = RateLimiter(base_pause_s=retry_base_s)  # one key: shared by every conversation at once
        self.sessions: dict[str, ProposalSession] = {}  # per experiment, for its fixes
        self._lessons: dict[str, str] = {}  # experiment proposing -> the experiment whose lesson it was asked for
        self._lessons_lock = threading.Lock()

    def propose(self, context: ProposalContext, transcript: Transcript) -> Proposal:
        conversation = self.open_conversation()
        system = system_prompt(context.program_text, self.max_tool_calls, context.facts, context.code_only)
        notes = read_notes(self.workspace_dir)
        user = state_message(context, notes, self.algorithmic_share)
        conversation.start(system, user, TOOLS)
        transcript.event("llm_request", provider=conversation.provider, model=conversation.model,
                         program=context.program_name, system_sha256=hashlib.sha256(system.encode()).hexdigest(),
                         system=system, user="\n\n".join(user), tools=[t.name for t in TOOLS])
        files = {"train.py": context.train_source, **frozen_files(self.workspace_dir, context.track),
                 "program.md": context.program_text}
        toolbox = ToolBox(self.workspace_dir, files, context.history, notes.text)
        session = ProposalSession(conversation, toolbox, context.train_source, transcript,
                                  self._lesson_to_ask(context), context.claim, context.spend, context.code_only)
        self.sessions[context.experiment_id] = session
        try:
            return self._converse(session)
        except BaseException:
            self._lessons.pop(context.experiment_id, None)
            raise

    def fix(self, crashed: Crashed, crashed_source: str, transcript: Transcript) -> Proposal:
        """A fix for a fixable crash, in the conversation that proposed the change."""
        if (proposed := self.sessions.get(crashed.id)) is None:
            raise ProposerError(f"no conversation of experiment {crashed.id} to continue")
        proposed.toolbox.files["train.py"] = crashed_source
        tail = prompt_tail(crashed.log_tail, LOG_TAIL_LINES)
        message = (f"Your change crashed ({crashed.triage}: {crashed.reason}). The log ends with:\n```\n{tail}\n```\n"
                   "Submit a fix with submit_experiment. Your edits now apply to train.py as you changed it "
                   "(read_file shows that version); fix the cause, keep the idea.")
        proposed.conversation.add_user(message)
        transcript.event("fix_requested", message=message)
        return self._converse(ProposalSession(proposed.conversation, proposed.toolbox, crashed_source, transcript))

    def observe(self, record: ExperimentRecord) -> None:
        self.sessions.pop(record.id, None)
        self._lessons.pop(record.id, None)  # its lesson is in its record now, or was never drawn

    def _lesson_to_ask(self, context: ProposalContext) -> str | None:
        """The experiment whose lesson this proposal is asked for: the newest decided one, unless another open
        conversation was asked for it already."""
        with self._lessons_lock:
            due = lesson_due(context.history, [r.id for r in context.running])
            if due is None or due.id in self._lessons.values():
                return None
            self._lessons[context.experiment_id] = due.id
            return due.id

    def _converse(self, session: ProposalSession) -> Proposal:
        usage = session.usage
        try:
            return self._tool_loop(session)
        except RequestRefused as err:
            raise ProposerError(str(err), usage.model_copy()) from err
        except (ProposerError, ProviderFatal, ProviderUnavailable) as err:
            err.usage = usage.model_copy()  # what the calls before the outage spent still counts
            raise
        except Exception as err:  # noqa: BLE001 - whatever else broke, it costs this proposal, not the night
            session.transcript.event("proposal_error", error=f"{type(err).__name__}: {err}")
            raise ProposerError(f"the proposal broke off ({type(err).__name__}: {err})", usage.model_copy()) from err

    def _tool_loop(self, session: ProposalSession) -> Proposal:
        conversation, usage = session.conversation, session.usage
        while True:
            if usage.input_tokens + usage.output_tokens > self.max_proposal_tokens:
                raise ProposerError(f"the proposal used {usage.input_tokens + usage.output_tokens:,} tokens, over "
                                    f"its budget of {self.max_proposal_tokens:,}, without a valid submission")
            turn = self._step(session)
            if turn.stop_reason in REFUSED:
                raise ProposerError(f"the model declined to answer (stop reason {turn.stop_reason}): "
                                    f"{turn.text[:300] or 'no text'}")
            if turn.stop_reason in CONTEXT_FULL and not turn.tool_calls:
                if not conversation.trim():
                    raise ProposerError("the conversation filled the model's context window")
                conversation.add_user("Your reply was cut: the conversation filled the context window, so old tool "
                                      "results were shortened. Call submit_experiment now.")
                continue
            if not turn.tool_calls:
                session.calls += 1
                if session.calls > self.max_tool_calls:
                    raise ProposerError(f"no valid submit_experiment within {self.max_tool_calls} tool calls")
                conversation.add_user("Use the tools, and end your turn by calling submit_experiment with one change. "
                                      + self._calls_left(session.calls))
                continue
            results, accepted = self._answer(turn, session)
            # Every call of the turn is answered, even when the proposal ends here.
            conversation.add_tool_results(results, None if accepted is not None else self._calls_left(session.calls))
            if accepted is not None:
                accepted.meta.update(provider=conversation.provider, model=conversation.model,
                                     tool_calls=session.calls, reflections=session.reflections)
                accepted.usage = usage.model_copy()
                return accepted
            if session.reflections > MAX_REFLECTIONS:
                raise ProposerError(f"{session.reflections} invalid submissions in one turn; last: "
                                    f"{results[-1].content}")
            if session.calls >= self.max_tool_calls:
                raise ProposerError(f"no valid submit_experiment within {self.max_tool_calls} tool calls")

    def _answer(self, turn: AssistantTurn, session: ProposalSession) -> tuple[list[ToolResult], Proposal | None]:
        """A result for every call of the turn, in order, and the proposal its submit_experiment made, if any."""
        transcript = session.transcript
        results, accepted = [], None
        for call in turn.tool_calls:
            session.calls += 1
            transcript.event("tool_call", id=call.id, name=call.name, arguments=call.arguments)
            if turn.stop_reason in CUT_SHORT:
                result = ToolResult(call.id, "not run: your reply was cut at the output limit before this call "
                                             "was complete; send it again, shorter (fewer or smaller edits)", True)
            elif accepted is not None:
                result = ToolResult(call.id, "skipped: this turn already submitted an experiment", True)
            elif session.calls > self.max_tool_calls:
                result = ToolResult(call.id, "not run: no tool calls are left", True)
            elif call.name == SUBMIT:
                result, accepted = self._submit(call, session)
                session.reminded = session.reminded or result.content.startswith(LESSON_REMINDER)
                session.reflections += accepted is None
            else:
                result = session.toolbox.run(call)
            transcript.event("tool_result", id=call.id, name=call.name, is_error=result.is_error,
                             content=result.content)
            results.append(result)
        return results, accepted

    def _calls_left(self, calls: int) -> str:
        if (left := self.max_tool_calls - calls) <= 1:
            return "This is your last tool call: call submit_experiment now with your best change."
        return f"{left} tool calls left."

    def _step(self, session: ProposalSession) -> AssistantTurn:
        conversation, transcript, usage = session.conversation, session.transcript, session.usage
        trimmed = False
        while True:
            transcript.event("request", provider=conversation.provider, model=conversation.model,
                             number=usage.calls + 1)
            try:
                turn = call_with_retries(lambda: self._charged_step(session),
                                         conversation.provider,
                                         on_retry=lambda info: transcript.event("retry", **info),
                                         outage_window_s=self.outage_window_s, base_s=self.retry_base_s,
                                         limiter=self.limits)
                break
            except ContextTooLong as err:
                transcript.event("refused", reason=str(err), trimmed=trimmed)
                if trimmed or not conversation.trim():
                    raise
                trimmed = True  # once: old tool results are cut and the request sent again
            except RequestRefused as err:
                transcript.event("refused", reason=str(err))
                raise
        turn.usage.cost_usd = self.prices.cost(conversation.model, turn.usage)
        usage.add(turn.usage)
        for thought in turn.thinking:
            transcript.event("thinking", text=thought)
        transcript.event("assistant", text=turn.text, stop_reason=turn.stop_reason, usage=turn.usage.model_dump(),
                         priced=self.prices.price(conversation.model) is not None, service_model=turn.service_model,
                         request_id=turn.request_id, params=turn.params)
        return turn

    def _charged_step(self, session: ProposalSession) -> AssistantTurn:
        """One request; if it fails after the service began to answer, what it reported spending so far counts."""
        try:
            return session.conversation.step()
        except Exception as error:
            spent = getattr(error, "spent", None)
            if isinstance(spent, Usage):
                spent.cost_usd = self.prices.cost(session.conversation.model, spent)
                session.usage.add(spent)
                session.transcript.event("failed_call_spend", usage=spent.model_dump(), error=f"{type(error).__name__}")
            raise

    def _submit(self, call: ToolCall, session: ProposalSession) -> tuple[ToolResult, Proposal | None]:
        base_source, lesson_for = session.base_source, session.lesson_for
        try:
            arguments = parse_arguments(call)
        except BadToolCall as err:
            return ToolResult(call.id, f"{err}; nothing was committed", True), None
        if not (description := arguments.description.strip()):
            return ToolResult(call.id, "submit_experiment needs a one-line description of the change", True), None
        if not arguments.hypothesis.strip() or not arguments.expected.strip():
            return ToolResult(call.id, "submit_experiment needs a hypothesis (why the change should help) and the "
                                       "expected effect; nothing was committed", True), None
        if lesson_for and not arguments.lesson.strip() and not session.reminded:
            return ToolResult(call.id, f"{LESSON_REMINDER} {lesson_for} is due: set `lesson` to one or two "
                                       "sentences on what its result says, and submit again; nothing was committed",
                              True), None
        edits = [Edit(e.old_string, e.new_string) for e in arguments.edits]
        try:
            source = checked_source(base_source, edits)
        except EditRejected as err:
            return ToolResult(call.id, f"rejected, nothing was committed: {err}", True), None
        except Exception as err:  # noqa: BLE001 - whatever the edits did to the checks, the model is told
            return ToolResult(call.id, f"rejected, nothing was committed: the edits could not be checked "
                                       f"({type(err).__name__}: {err})", True), None
        if session.code_only and (values_only := values_only_refusal(base_source, source)):
            return ToolResult(call.id, values_only, True), None
        if taken := session.claim(source, edits):
            return ToolResult(call.id, f"refused, nothing was committed: {taken}", True), None
        return (ToolResult(call.id, "accepted: the change is committed and trained now"),
                Proposal(description.splitlines()[0][:200], edits, hypothesis=arguments.hypothesis.strip(),
                         expected=arguments.expected.strip(),
                         lesson=(arguments.lesson.strip() or LESSON_NOT_GIVEN) if lesson_for else "",
                         lesson_for=lesson_for, source=source, applied_to=base_source))
