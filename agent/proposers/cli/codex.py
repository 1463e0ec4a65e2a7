"""Codex (`codex`) as a coding CLI: `codex exec --json` headless in the scratch directory. Codex has no tool that
reads a file (it reads with its shell), so it keeps its shell, in Codex's own sandbox, which sees only the scratch
directory (and the system's programs) and no network.

Flags and settings, as `codex exec --help`, `codex features list` and the permissions documentation
(developers.openai.com/codex/permissions) describe them for 0.169.0, and as they behaved against the loopback server
(checked 2026-12-05):
- exec --json: JSONL events on stdout (thread.started, turn.started/completed/failed, item.started/completed with
  reasoning, agent_message, command_execution, file_change, error items; turn.completed carries the usage). Tool
  calls a model makes from code mode (the newest models' one `exec` tool running JavaScript) come out as the same
  command_execution and file_change items.
- --skip-git-repo-check: the scratch directory is no git repository. --ephemeral: no session files are kept.
  --ignore-rules: no user or project execpolicy .rules. -C: the scratch directory is the workspace root.
- approval_policy="never": nothing waits for a person; what the sandbox refuses fails and the model is told so.
- default_permissions="scratch" with [permissions.scratch.filesystem] (permission profiles, beta since 0.138; they
  replace --sandbox, which must then not be given, and whose workspace-write lets commands read anywhere):
  ":minimal" read (the system's programs and libraries), the workspace root (scratch) writable, and read of two
  places the sandbox helper itself needs (the codex program's directory, CODEX_HOME/tmp/arg0-linux, where codex
  links its codex-linux-sandbox helper; without them every command fails with "bwrap: execvp
  ...codex-linux-sandbox: No such file or directory"). Everything else is invisible to commands: `cat` of a file
  elsewhere says "No such file or directory", and so does view_image. The profile has no network entry: opening a
  socket is not permitted. apply_patch outside the scratch directory is rejected, and so is a command asking for
  sandbox_permissions "require_escalated" ("approval policy is Never").
- shell_environment_policy.inherit="core": commands see HOME, PATH and the like, never the API key in our env.
- web_search="disabled", and the features apps, plugins, multi_agent, goals, image_generation, tool_suggest,
  hooks and browser_use off: no web, no connectors or MCP servers, no sub-agents.
- project_doc_max_bytes=0: no AGENTS.md of the directories above scratch joins the instructions.
- analytics.enabled=false, check_for_update_on_startup=false: nothing but the model requests leaves the machine.
A setting codex does not know is ignored with an "unrecognized configuration setting" error item (a cli_warning in
the transcript); the tests see none.

CODEX_HOME: with an API key (OPENAI_API_KEY or CODEX_API_KEY) or a --base-url, a fresh one inside the scratch
directory (scratch/.codex, which Codex keeps read-only for commands) holding only our config.toml: a custom
provider at the base URL over the Responses API (the built-in "openai" provider ignored OPENAI_BASE_URL and tried
its WebSocket transport to api.openai.com first). Codex will not link its sandbox helper under the temporary
directory, where scratch is, so TMPDIR points inside scratch. Without a key, the user's own CODEX_HOME, where
`codex login` keeps the login (auth.json; a copy that refreshed its token could log the original out), with
--ignore-user-config so none of its config.toml (MCP servers, profiles, providers) applies; commands can read only
its tmp/arg0-linux, never auth.json.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from agent.llm.pricing import PriceTable
from agent.llm.types import Usage
from agent.proposers.cli.outcome import RESULT_CHARS, CLIOutcome, clipped, count, json_event
from agent.recording.transcript import Transcript

KEY_VARIABLES = ("OPENAI_API_KEY", "CODEX_API_KEY")   # the key our provider sends, first one set
HOME = ".codex"                                        # the fresh CODEX_HOME inside scratch
TMP = ".tmp"                                           # TMPDIR of codex and its commands, inside scratch
PROVIDER = "autoresearch"
OPENAI_URL = "https://api.openai.com/v1"
DISABLED_FEATURES = ("apps", "plugins", "multi_agent", "goals", "image_generation", "tool_suggest", "hooks",
                     "browser_use")


class Codex:
    name = "codex"
    executable = "codex"
    states_cost = False  # turn.completed gives tokens only

    def __init__(self, prices: PriceTable | None = None) -> None:
        self.model: str | None = None  # of the run being read, for its cost (codex's events do not name it)
        self.prices = prices or PriceTable()

    def command(self, executable: str, scratch: Path, prompt: str, model: str | None) -> list[str]:
        self.model = model
        own_home = (scratch / HOME / "config.toml").is_file()  # environment() wrote it: a key or base URL is set
        home = scratch / HOME if own_home else Path(os.environ.get("CODEX_HOME") or Path.home() / ".codex")
        argv = [executable, "exec", "--json", "--skip-git-repo-check", "--ephemeral", "--ignore-rules",
                "-C", str(scratch)]
        if not own_home:
            argv.append("--ignore-user-config")
        argv += [arg for key, value in settings(home, executable).items() for arg in ("-c", f"{key}={value}")]
        argv += [arg for feature in DISABLED_FEATURES for arg in ("--disable", feature)]
        return argv + (["-m", model] if model else []) + ["--", prompt]

    def environment(self, scratch: Path, base_url: str | None) -> dict[str, str]:
        key = next((name for name in KEY_VARIABLES if os.environ.get(name)), None)
        env = {key: os.environ[key]} if key else {}
        # TMPDIR inside scratch, for the sandbox helper (module docstring); commands' temporary files stay there too
        (scratch / TMP).mkdir(exist_ok=True)
        env["TMPDIR"] = str(scratch / TMP)
        if key is None and base_url is None:
            if os.environ.get("CODEX_HOME"):
                env["CODEX_HOME"] = os.environ["CODEX_HOME"]
            return env  # the login in the user's CODEX_HOME
        home = scratch / HOME
        # made now: the sandbox keeps scratch/.codex read-only and could not make the helper's mount point in it
        (home / "tmp" / "arg0-linux").mkdir(parents=True, exist_ok=True)
        (home / "config.toml").write_text(provider_config(base_url or OPENAI_URL, key))
        env["CODEX_HOME"] = str(home)
        return env

    def read_event(self, line: str, transcript: Transcript, outcome: CLIOutcome) -> None:
        if (event := json_event(line)) is None:
            return
        if (kind := event.get("type")) == "thread.started":
            transcript.event("cli_started", cli=self.name, model=self.model, thread=event.get("thread_id"))
        elif kind in ("item.started", "item.completed") and isinstance(event.get("item"), dict):
            self._item(event["item"], kind == "item.completed", transcript, outcome)
        elif kind in ("turn.completed", "turn.failed"):
            if kind == "turn.completed":
                self._usage(event.get("usage") or {}, outcome)
            else:
                outcome.failed, error = True, event.get("error")
                said = error.get("message") if isinstance(error, dict) else error
                outcome.final_text = str(said or "") or outcome.final_text
            transcript.event("cli_result", cli=self.name, is_error=kind == "turn.failed",
                             text=outcome.final_text[:RESULT_CHARS], usage=outcome.usage.model_dump())
        elif kind == "error":  # a retry it reports ("Reconnecting... 2/5"); the turn goes on or fails on its own
            transcript.event("cli_warning", cli=self.name, text=str(event.get("message", ""))[:RESULT_CHARS])

    def _item(self, item: dict, completed: bool, transcript: Transcript, outcome: CLIOutcome) -> None:
        kind, item_id = item.get("type"), item.get("id")
        if kind == "command_execution" and not completed:
            transcript.event("tool_call", id=item_id, name="shell", arguments={"command": clipped(item.get("command"))})
        elif kind == "command_execution":
            transcript.event("tool_result", id=item_id, is_error=item.get("status") != "completed",
                             exit_code=item.get("exit_code"),
                             content=str(item.get("aggregated_output") or "")[-RESULT_CHARS:])
        elif kind == "file_change" and completed:
            changes = [{"path": c.get("path"), "kind": c.get("kind")} for c in item.get("changes") or []
                       if isinstance(c, dict)]
            transcript.event("tool_call", id=item_id, name="apply_patch", arguments={"changes": changes})
            transcript.event("tool_result", id=item_id, is_error=item.get("status") != "completed",
                             content=str(item.get("status")))
        elif kind in ("mcp_tool_call", "web_search") and completed:
            transcript.event("tool_call", id=item_id, name=kind, arguments={k: v for k, v in item.items()
                                                                            if k not in ("id", "type")})
        elif kind == "reasoning" and completed and item.get("text"):
            transcript.event("thinking", text=clipped(item["text"]))
        elif kind == "agent_message" and completed and item.get("text"):
            outcome.final_text = str(item["text"])
            transcript.event("assistant", text=clipped(outcome.final_text))
        elif kind == "error" and completed:
            transcript.event("cli_warning", cli=self.name, text=str(item.get("message", ""))[:RESULT_CHARS])

    def _usage(self, usage: dict, outcome: CLIOutcome) -> None:
        """turn.completed's usage: input_tokens include the cached ones (as the Responses API counts them)."""
        turn = Usage(input_tokens=count(usage, "input_tokens"), output_tokens=count(usage, "output_tokens"),
                     cache_read_tokens=count(usage, "cached_input_tokens"),
                     cache_write_tokens=count(usage, "cache_write_input_tokens"),
                     thinking_tokens=count(usage, "reasoning_output_tokens"), calls=1)
        turn.cost_usd = self.prices.cost(self.model, turn) if self.model else 0.0
        outcome.usage.add(turn)

    def failure(self, returncode: int, stderr_tail: str, outcome: CLIOutcome) -> str:
        said = outcome.final_text.strip() if outcome.failed else ""
        said = said or stderr_tail.strip() or outcome.final_text.strip() or "no message"
        advice = ""
        if any(word in said.lower() for word in ("401", "unauthorized", "api key", "login", "logged in")):
            advice = (". Log in once with `codex login`, or set OPENAI_API_KEY (or CODEX_API_KEY) in the environment "
                      "the service runs in.")
        said = said[-1500:].rstrip(". ") if advice else said[-1500:]
        return f"codex failed (exit code {returncode}): {said}{advice}"


def provider_config(base_url: str, key: str | None) -> str:
    """config.toml of a fresh CODEX_HOME: the Responses API at base_url, with the key from the variable named."""
    lines = [f"model_provider = {_toml(PROVIDER)}", "", f"[model_providers.{PROVIDER}]", f"name = {_toml(PROVIDER)}",
             f"base_url = {_toml(base_url)}", 'wire_api = "responses"']
    if key:
        lines.append(f"env_key = {_toml(key)}")
    return "\n".join(lines) + "\n"


def settings(home: Path, executable: str) -> dict[str, str]:
    """The -c overrides (TOML values) of every run."""
    readable = {":minimal": "read", str(home / "tmp" / "arg0-linux"): "read", str(program_dir(executable)): "read"}
    filesystem = ", ".join(f"{_toml(path)} = {_toml(access)}" for path, access in readable.items())
    return {"approval_policy": '"never"', "default_permissions": '"scratch"',
            "permissions.scratch.filesystem": f'{{{filesystem}, ":workspace_roots" = {{ "." = "write" }}}}',
            "shell_environment_policy.inherit": '"core"', "web_search": '"disabled"', "project_doc_max_bytes": "0",
            "analytics.enabled": "false", "check_for_update_on_startup": "false"}


def program_dir(executable: str) -> Path:
    """Where the codex program lives: for the npm package (bin/codex.js starting the native binary of
    @openai/codex-<platform>), the node_modules/@openai directory holding both; else the binary's directory."""
    real = Path(executable).resolve()
    return next((p for p in real.parents if p.name == "@openai" and p.parent.name == "node_modules"), real.parent)


def _toml(text: str) -> str:
    return json.dumps(text)  # a TOML basic string: JSON's escapes are TOML's
