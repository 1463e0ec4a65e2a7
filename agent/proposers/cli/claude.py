"""Claude Code (`claude`) as a coding CLI: headless (-p), stream-json events, file tools only, confined to the
scratch directory.

Flags, as `claude --help` of 2.1.328 describes them (checked 2026-12-05):
- --tools Read,Edit,Write,Glob,Grep: the only built-in tools it gets (no Bash, no web tools, no subagents); a
  call of any other tool is answered "No such tool available".
- --restricted: ignores user, project and local settings files (so their hooks, permissions and MCP servers) and
  confines the file tools to the working directory: a Read outside it is refused.
- --strict-mcp-config with no --mcp-config: no MCP server at all. --disable-slash-commands: no skills.
- --permission-mode acceptEdits with --permission-prompts none: edits inside the directory go ahead; anything that
  would ask a person is denied.
- --no-session-persistence: nothing of the session is saved for a later --resume.
CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1: no telemetry, error reports, auto-update or release-note traffic. (Seen
2026-12-05 with 2.1.328 -p: only the agent's own POST /v1/messages requests reach ANTHROPIC_BASE_URL.)
In -p mode ANTHROPIC_API_KEY, when set, is used rather than the subscription login.
"""

from __future__ import annotations

import os
from pathlib import Path

from agent.llm.types import Usage
from agent.proposers.cli.outcome import RESULT_CHARS, CLIOutcome, clipped, count, json_event
from agent.recording.transcript import Transcript

TOOLS = "Read,Edit,Write,Glob,Grep"
FLAGS = ("--tools", TOOLS, "--restricted", "--strict-mcp-config", "--disable-slash-commands",
         "--permission-mode", "acceptEdits", "--permission-prompts", "none", "--no-session-persistence")
# Its login: an API key, a token, or where `claude` keeps the subscription login (CLAUDE_CONFIG_DIR or ~/.claude).
LOGIN_VARIABLES = ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN", "CLAUDE_CONFIG_DIR")


class ClaudeCode:
    name = "claude-code"
    executable = "claude"
    states_cost = True  # total_cost_usd of its result event

    def command(self, executable: str, scratch: Path, prompt: str, model: str | None) -> list[str]:
        argv = [executable, "-p", prompt, "--output-format", "stream-json", "--verbose", *FLAGS]
        return argv + (["--model", model] if model else [])

    def environment(self, scratch: Path, base_url: str | None) -> dict[str, str]:
        env = {name: os.environ[name] for name in LOGIN_VARIABLES if os.environ.get(name)}
        if base_url:
            env["ANTHROPIC_BASE_URL"] = base_url
        env["CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"] = "1"
        return env

    def read_event(self, line: str, transcript: Transcript, outcome: CLIOutcome) -> None:
        if (event := json_event(line)) is None:
            return
        if (kind := event.get("type")) == "system" and event.get("subtype") == "init":
            transcript.event("cli_started", cli=self.name, model=event.get("model"), tools=event.get("tools"),
                             permission_mode=event.get("permissionMode"), cwd=event.get("cwd"))
        elif kind in ("assistant", "user"):
            self._message(event.get("message") or {}, transcript)
        elif kind == "result":
            self._result(event, transcript, outcome)

    def _message(self, message: dict, transcript: Transcript) -> None:
        content = message.get("content")
        for block in content if isinstance(content, list) else []:
            if not isinstance(block, dict):
                continue
            if (kind := block.get("type")) == "thinking" and block.get("thinking"):
                transcript.event("thinking", text=clipped(block["thinking"]))
            elif kind == "text" and block.get("text"):
                transcript.event("assistant", text=clipped(block["text"]))
            elif kind == "tool_use":
                transcript.event("tool_call", id=block.get("id"), name=block.get("name"),
                                 arguments=clipped(block.get("input")))
            elif kind == "tool_result":
                transcript.event("tool_result", id=block.get("tool_use_id"), is_error=bool(block.get("is_error")),
                                 content=_text_of(block.get("content"))[:RESULT_CHARS])

    def _result(self, event: dict, transcript: Transcript, outcome: CLIOutcome) -> None:
        usage = event.get("usage") or {}
        fresh, written, read = (count(usage, "input_tokens"), count(usage, "cache_creation_input_tokens"),
                                count(usage, "cache_read_input_tokens"))
        outcome.usage = Usage(input_tokens=fresh + written + read, output_tokens=count(usage, "output_tokens"),
                              cache_read_tokens=read, cache_write_tokens=written,
                              thinking_tokens=count(usage.get("output_tokens_details") or {}, "thinking_tokens"),
                              cost_usd=float(event.get("total_cost_usd") or 0.0),
                              calls=int(event.get("num_turns") or 0))
        outcome.final_text = str(event.get("result") or "")
        outcome.failed = bool(event.get("is_error"))
        transcript.event("cli_result", cli=self.name, is_error=outcome.failed, text=outcome.final_text[:RESULT_CHARS],
                         turns=event.get("num_turns"), reason=event.get("terminal_reason"),
                         permission_denials=event.get("permission_denials"), usage=outcome.usage.model_dump())

    def failure(self, returncode: int, stderr_tail: str, outcome: CLIOutcome) -> str:
        said = outcome.final_text.strip() or stderr_tail.strip() or "no message"
        advice = ""
        if "login" in said.lower() or "api key" in said.lower():
            advice = (" Log in once with `claude` (then /login), or set ANTHROPIC_API_KEY in the environment the "
                      "service runs in.")
        return f"claude-code failed (exit code {returncode}): {said[-1500:]}{advice}"


def _text_of(content) -> str:
    if isinstance(content, list):
        return "\n".join(str(b.get("text", "")) for b in content if isinstance(b, dict))
    return content if isinstance(content, str) else ""
