"""Webhook notifications (--notify) against a webhook served on 127.0.0.1 by the test: what reaches it from a
night of the real loop (on a runner that scores train.py from a table), each service's body, the retries, a
dead webhook that changes nothing in the night, and nothing secret in any payload."""

import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from typer.testing import CliRunner

from agent import cli
from agent.loop import LoopSettings, run_loop
from agent.proposers.base import Proposal, Proposer
from agent.proposers.edits import Edit
from agent.recording.ledger import read_records
from agent.report.build import write_report
from agent.tracking.notify.events import Event, Notification
from agent.tracking.notify.formats import DISCORD_CONTENT_CHARS, Format, webhook
from agent.tracking.notify.night import NightNotifier
from agent.tracking.notify.sender import RetryPolicy, Sender, drain
from agent.workspace import Workspace
from tests.agent.conftest import PROGRAM
from tests.helpers.synthetic_runner import SyntheticRunner

GAINS = {"MATRIX_LR = 0.05": 0.02, "WARMDOWN_RATIO = 0.31": -0.01}
CRASHES = ("WARMDOWN_RATIO = 0.32", "WARMDOWN_RATIO = 0.33", "WARMDOWN_RATIO = 0.34")
FAST = RetryPolicy(timeout_seconds=0.5, attempts=3, give_up_seconds=5, backoff_seconds=0.05,
                   max_backoff_seconds=0.1)


class Webhook:
    """An HTTP server on 127.0.0.1 that records each POST and answers with the statuses given in turn (then
    200), or holds every request unanswered (hang)."""

    def __init__(self, statuses=(), hang=False, retry_after=None):
        self.requests: list[tuple[str, dict, bytes]] = []
        self.statuses, self.hang, self.retry_after = list(statuses), hang, retry_after
        self.released = threading.Event()
        hook = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                data = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                hook.requests.append((self.path, dict(self.headers), data))
                if hook.hang:
                    hook.released.wait(30)
                    return
                status = hook.statuses.pop(0) if hook.statuses else 200
                self.send_response(status)
                if status == 429 and hook.retry_after is not None:
                    self.send_header("Retry-After", str(hook.retry_after))
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def url(self, path="/hook") -> str:
        return f"http://127.0.0.1:{self.server.server_port}{path}"

    def bodies(self) -> list[bytes]:
        return [data for _, _, data in self.requests]

    def notifications(self) -> list[Notification]:
        return [Notification.model_validate_json(data) for data in self.bodies()]

    def close(self):
        self.released.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def hooks():
    made = []

    def make(**kwargs) -> Webhook:
        made.append(Webhook(**kwargs))
        return made[-1]
    yield make
    for hook in made:
        hook.close()


def unused_port() -> int:
    server = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    port = server.server_port
    server.server_close()
    return port


class Changes(Proposer):
    """Proposes the given changes of train.py in order, each a NAME = value line replacing the script's own."""

    name = "scripted"

    def __init__(self, *changes, description=lambda change: change):
        self.changes, self.description = list(changes), description

    def propose(self, context, transcript):
        change = self.changes.pop(0)
        line = re.search(rf"^{change.split(' = ')[0]} = \S+", context.train_source, re.MULTILINE).group(0)
        return Proposal(self.description(change), [Edit(line, change)])


def night(workspace, changes, urls=(), messages=None, runner=None, **notifier_options):
    """A night of the real loop (the baseline, then the changes) with a notifier on these URLs, told the stop and
    the night's end as `run` tells them; (why, the records, the notifier). Its seeds count up, so that two such
    nights can be compared number for number."""
    messages = [] if messages is None else messages
    notifier = NightNotifier(workspace, list(urls), say=messages.append, poll_seconds=0.05,
                             **{"policy": FAST} | notifier_options).start() if urls else None
    why = run_loop(workspace, Changes(*changes), runner or SyntheticRunner(GAINS, crashes=CRASHES),
                   LoopSettings(max_experiments=len(changes) + 1, noise_seeds=0, overlap=False, counted_seeds=True),
                   say=messages.append)
    if notifier is not None:
        notifier.stopped(why)
        notifier.night_ended(workspace.dir / "report" / "index.html")
        notifier.close(seconds=5)
    return why, read_records(workspace.dir), notifier


def decisions(records):
    return [(r.id, r.status.value, r.val_bpb, r.description) for r in records]


def test_a_keep_the_stop_and_the_nights_end_reach_the_webhook_from_the_real_loop(workspace, hooks):
    hook = hooks()
    why, records, notifier = night(workspace, ["MATRIX_LR = 0.05", "WARMDOWN_RATIO = 0.31"], [hook.url()])
    assert [r.status.value for r in records] == ["keep", "keep", "discard"]
    sent = hook.notifications()
    assert [n.event for n in sent] == [Event.KEEP, Event.STOPPED, Event.NIGHT_ENDED]
    kept, stopped, ended = sent
    assert (kept.experiment, kept.val_bpb, kept.best) == ("0001", records[1].val_bpb, records[1].val_bpb)
    assert kept.gain == pytest.approx(records[0].val_bpb - records[1].val_bpb)
    assert "MATRIX_LR = 0.05" in kept.text and kept.tag == workspace.tag
    assert stopped.reason == why and why in stopped.text
    assert (ended.experiments, ended.keeps, ended.best) == (3, 1, records[1].val_bpb)
    assert ended.gain == pytest.approx(records[0].val_bpb - records[1].val_bpb)
    assert ended.report.endswith("index.html") and ended.cost_usd == 0.0
    assert notifier.senders[0].sent == 3


def test_crash_streaks_and_plateaus_are_notified(workspace, hooks):
    hook = hooks()
    messages = []
    notifier = NightNotifier(workspace, [hook.url()], say=messages.append, policy=FAST, poll_seconds=0.05,
                             crash_streak=2).start()
    why = run_loop(workspace, Changes("WARMDOWN_RATIO = 0.32", "WARMDOWN_RATIO = 0.33", "WARMDOWN_RATIO = 0.31"),
                   SyntheticRunner(GAINS, crashes=CRASHES),
                   LoopSettings(noise_seeds=0, overlap=False, plateau=3, max_experiments=10), say=messages.append)
    notifier.stopped(why)
    notifier.close(seconds=5)
    assert why.startswith("plateau: 3 experiments without a keep")
    events = [(n.event, n.experiment) for n in hook.notifications()]
    assert events == [(Event.CRASH_STREAK, "0002"), (Event.PLATEAU, "0003"), (Event.STOPPED, None)]
    streak, plateau, _ = hook.notifications()
    assert streak.streak == 2 and plateau.streak == 3 and "0001 to 0003" in plateau.text


def test_a_night_without_flashattention_3_is_said_once_and_shown_in_status_and_the_report(workspace, hooks):
    hook = hooks()
    notifier = NightNotifier(workspace, [hook.url()], say=lambda _: None, policy=FAST, poll_seconds=0.05).start()
    run_loop(workspace, Changes("MATRIX_LR = 0.05", "WARMDOWN_RATIO = 0.31"), SyntheticRunner(GAINS, fallback=True),
             LoopSettings(noise_seeds=0, overlap=False, max_experiments=3), say=lambda _: None)
    notifier.close(seconds=5)
    fallbacks = [n for n in hook.notifications() if n.event == Event.ATTENTION_FALLBACK]
    assert [n.experiment for n in fallbacks] == ["0000"], hook.notifications()
    assert "trained with flex: no FlashAttention-3 build loaded (varunneal/flash-attention-3" in fallbacks[0].text
    status = CliRunner().invoke(cli.app, ["status", "--tag", workspace.tag, "--workspaces", str(workspace.dir.parent)])
    said = " ".join(status.output.split())
    assert "3 experiment(s) trained without the FlashAttention-3 their profile asks for" in said, status.output
    assert "latest 0002: trained with flex" in said
    page = write_report(workspace).read_text()
    assert "not FlashAttention-3" in page and "latest 0002: trained with flex" in page


def test_runs_with_flashattention_3_say_nothing_of_kernels(workspace, hooks):
    hook = hooks()
    notifier = NightNotifier(workspace, [hook.url()], say=lambda _: None, policy=FAST, poll_seconds=0.05).start()
    run_loop(workspace, Changes("MATRIX_LR = 0.05"), SyntheticRunner(GAINS),
             LoopSettings(noise_seeds=0, overlap=False, max_experiments=2), say=lambda _: None)
    notifier.close(seconds=5)
    assert not [n for n in hook.notifications() if n.event == Event.ATTENTION_FALLBACK]
    status = CliRunner().invoke(cli.app, ["status", "--tag", workspace.tag, "--workspaces", str(workspace.dir.parent)])
    assert "FlashAttention-3" not in status.output and "not FlashAttention-3" not in write_report(workspace).read_text()


def test_each_service_gets_its_own_body(hooks):
    hook = hooks()
    long = Notification(event=Event.STOPPED, tag="night", title="night: stopped ✓", reason="x" * 5000,
                        text="night: <!channel> stopped " + "é" * 5000)
    senders = [Sender(webhook(f"{name}+{hook.url('/' + name)}", number), print, FAST)
               for number, name in enumerate(["slack", "discord", "ntfy", "json"], 1)]
    for sender in senders:
        sender.put(long)
    assert drain(senders, 5) == 0
    by_path = {path: (headers, data) for path, headers, data in hook.requests}
    slack = json.loads(by_path["/slack"][1])
    assert list(slack) == ["text"] and slack["text"].startswith("night: &lt;!channel&gt; stopped éé")
    discord = json.loads(by_path["/discord"][1])
    assert discord["content"].startswith("night: <!channel> stopped") and discord["allowed_mentions"] == {"parse": []}
    assert DISCORD_CONTENT_CHARS - 10 < len(discord["content"]) <= DISCORD_CONTENT_CHARS
    headers, text = by_path["/ntfy"]
    assert headers["Content-Type"].startswith("text/plain") and headers["Title"] == "night: stopped ?"
    assert text.decode("utf-8").startswith("night: <!channel> stopped é") and len(text) <= 4096
    assert Notification.model_validate_json(by_path["/json"][1]) == long


def test_services_are_recognised_by_their_urls_and_shown_masked():
    cases = {"https://hooks.slack.com/services/T0/B0/SECRETTOKEN": Format.SLACK,
             "https://discord.com/api/webhooks/123/SECRETTOKEN": Format.DISCORD,
             "https://ntfy.sh/SECRETTOKEN": Format.NTFY, "https://ntfy.example.org/SECRETTOKEN": Format.NTFY,
             "https://example.org/hooks/SECRETTOKEN?key=SECRETTOKEN": Format.JSON,
             "slack+https://chat.example.org/hooks/SECRETTOKEN": Format.SLACK}
    for url, expected in cases.items():
        hook = webhook(url, 1)
        assert hook.format == expected and "SECRETTOKEN" not in hook.masked()
    assert webhook("discord+https://x.example/SECRETTOKEN", 2).url == "https://x.example/SECRETTOKEN"
    for url, problem in {"hooks.slack.com/services/SECRETTOKEN": "its scheme is '', not http or https",
                         "https:///SECRETTOKEN": "it names no host",
                         "https://ntfy.sh:SECRETTOKEN/": "its port is not a number"}.items():
        with pytest.raises(ValueError, match=rf"^--notify #3 is not a webhook URL: {problem}; give") as raised:
            webhook(url, 3)
        assert "SECRETTOKEN" not in str(raised.value)


def test_a_500_is_retried_until_it_succeeds_and_a_429_after_its_retry_after(hooks):
    failing, limited = hooks(statuses=[500, 503]), hooks(statuses=[429], retry_after=0.2)
    refused, throttled = hooks(statuses=[404]), hooks(statuses=[429], retry_after=3600)
    messages = []
    senders = [Sender(webhook(hook.url(), number), messages.append, FAST)
               for number, hook in enumerate([failing, limited, refused, throttled], 1)]
    notification = Notification(event=Event.STOPPED, tag="t", title="t", text="t: stopped")
    started = time.monotonic()
    for sender in senders:
        sender.put(notification)
    assert drain(senders, 5) == 0
    assert len(failing.requests) == 3 and senders[0].sent == 1
    assert len(limited.requests) == 2 and senders[1].sent == 1 and time.monotonic() - started >= 0.2
    assert len(refused.requests) == 1 and senders[2].dropped == 1  # a 404 is not retried
    assert len(throttled.requests) == 1 and senders[3].dropped == 1  # an hour's Retry-After is not waited for
    assert sorted(messages) == [f"warning: notifications to --notify #{n} (json, {hook.url('/…')}) fail (HTTP {code}); "
                                "the night goes on without them (said once)"
                                for n, hook, code in ((3, refused, 404), (4, throttled, 429))]


def test_a_dead_webhook_changes_nothing_in_the_night(workspace, test_track, hooks, tmp_path):
    changes = ["MATRIX_LR = 0.05", "WARMDOWN_RATIO = 0.32", "WARMDOWN_RATIO = 0.31"]
    _, without, _ = night(Workspace.create("t", test_track.spec, PROGRAM, root=tmp_path / "quiet"), changes)
    hanging, failing = hooks(hang=True), hooks(statuses=[500] * 100)
    messages = []
    started = time.monotonic()
    why, records, notifier = night(workspace, changes, [f"http://127.0.0.1:{unused_port()}/x", hanging.url(),
                                                        failing.url()], messages)
    assert time.monotonic() - started < 20  # the wait for the webhooks at the end is bounded (5 s here)
    assert decisions(records) == decisions(without) and "ran 4 experiment(s)" in why
    assert [r.status.value for r in records] == ["keep", "keep", "crash", "discard"]
    warnings = [m for m in messages if m.startswith("warning: notifications")]
    assert sorted(w.split(" (")[0] for w in warnings) == [f"warning: notifications to --notify #{n}" for n in (1, 2, 3)]
    assert "ReadTimeout" in warnings[[w.split(" (")[0][-1] for w in warnings].index("2")]
    assert len(failing.requests) == 3 * FAST.attempts  # keep, stop, night's end: each tried, each dropped
    assert all(sender.sent == 0 for sender in notifier.senders)


class MarkedLogs(SyntheticRunner):
    """Its crashed runs' logs end with a marker line."""

    MARKER = "LOG-MARKER-4f1c9e"

    def _result(self, workspace, job, source, slowdown):
        result = super()._result(workspace, job, source, slowdown)
        if result.returncode:
            with result.log_path.open("a") as log:
                log.write(f"{self.MARKER}\n")
            result.tail += f"\n{self.MARKER}"
        return result


def test_run_notifies_without_a_secret_a_log_line_or_the_url_anywhere(test_track, hooks, tmp_path, monkeypatch):
    key = "sk-planted-0123456789abcdef"
    monkeypatch.setenv("FAKE_PROVIDER_API_KEY", key)
    hook = hooks()
    secret_path = "/services/T000/B000/url-token-9d2e7a"
    changes = Changes("MATRIX_LR = 0.05", "WARMDOWN_RATIO = 0.32", "WARMDOWN_RATIO = 0.33", "WARMDOWN_RATIO = 0.34",
                      description=lambda change: f"{change} (the key is {key})")
    monkeypatch.setattr(cli, "_prepared_proposer", lambda settings: lambda workspace: changes)
    monkeypatch.setattr(cli, "_runner", lambda options: MarkedLogs(GAINS, crashes=CRASHES))
    result = CliRunner().invoke(cli.app, ["run", "--workspaces", str(tmp_path / "ws"), "--tag", "n", "--track", "test",
                                          "--max-experiments", "5", "--noise-seeds", "0",
                                          "--notify", f"json+{hook.url(secret_path)}",
                                          "--notify", f"slack+{hook.url('/slack')}"], terminal_width=300)
    assert result.exit_code == 0, result.output
    records = read_records(tmp_path / "ws" / "n")
    assert [r.status.value for r in records] == ["keep", "keep", "crash", "crash", "crash"]
    assert key in records[1].description and MarkedLogs.MARKER in records[-1].log_tail  # there to leak
    sent = [Notification.model_validate_json(data) for path, _, data in hook.requests if path == secret_path]
    assert [n.event for n in sent] == [Event.KEEP, Event.CRASH_STREAK, Event.STOPPED, Event.NIGHT_ENDED]
    assert "[$FAKE_PROVIDER_API_KEY]" in sent[0].text and sent[1].streak == 3
    slack = [json.loads(data)["text"] for path, _, data in hook.requests if path == "/slack"]
    assert len(slack) == 4 and slack[-1].startswith("n: night ended: 5 experiment(s), 1 keep(s)")
    assert all(key.encode() not in data and MarkedLogs.MARKER.encode() not in data for data in hook.bodies())
    assert "url-token-9d2e7a" not in result.output and "--notify #1 (json, http://127.0.0.1" in result.output
    for path in (tmp_path / "ws").rglob("*"):
        assert not path.is_file() or b"url-token-9d2e7a" not in path.read_bytes(), path
