"""The body each webhook service reads, chosen from its URL, and the URL as it may be shown.

A URL's format is named by a prefix (slack+https://..., discord+, ntfy+, json+) or else recognised by its host;
any other URL gets the generic JSON body (the Notification model). What the services take (their docs, checked
2026-12-05):
- Slack incoming webhooks (hooks.slack.com/services/...): a JSON body {"text": ...} with &, < and > escaped
  (<!channel> would notify everyone); posting is limited to about
  one message a second, answered 429 beyond it. Mattermost and Rocket.Chat take the same body (slack+ URLs).
- Discord webhooks (discord.com/api/webhooks/..., also discordapp.com and the ptb./canary. hosts): a JSON body
  {"content": ...} of at most 2000 characters; a 429 says when to try again in Retry-After (seconds).
- ntfy (ntfy.sh/<topic>, or a server of one's own, recognised when its host starts with "ntfy."): the message
  as a plain-text body and its title in a Title header; a body over 4096 bytes becomes an attachment, and
  header values must be Latin-1, so the title is sent as ASCII.
A webhook URL is a secret (Slack's and Discord's carry their token, an ntfy topic is its own password): it is
shown as masked() says, its scheme and host only, and stored nowhere.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from enum import Enum
from urllib.parse import urlsplit

from agent.tracking.notify.events import Notification

DISCORD_CONTENT_CHARS = 2000
NTFY_BODY_BYTES = 4096
SLACK_TEXT_CHARS = 3000  # Slack truncates far longer texts; ours are one line, this only bounds them
DISCORD_HOSTS = {"discord.com", "discordapp.com", "ptb.discord.com", "canary.discord.com"}


class Format(str, Enum):
    SLACK = "slack"
    DISCORD = "discord"
    NTFY = "ntfy"
    JSON = "json"


@dataclass(frozen=True)
class Webhook:
    url: str        # what is posted to (the format prefix taken off)
    format: Format
    number: int     # its place among the --notify URLs, from 1: how messages tell two of one host apart

    def masked(self) -> str:
        return f"--notify #{self.number} ({self.format.value}, {masked(self.url)})"


@dataclass(frozen=True)
class Body:
    content: bytes
    headers: dict[str, str] = field(default_factory=dict)


def masked(url: str) -> str:
    """The URL with everything after its host left out: no path, token, topic, query or password."""
    parts = urlsplit(url)
    port = _port(parts)
    return f"{parts.scheme or '?'}://{parts.hostname or '?'}{f':{port}' if port and port > 0 else ''}/…"


def _port(parts) -> int | None:
    """parts.port, -1 where it is not a number (urlsplit raises that only when the port is asked for)."""
    try:
        return parts.port
    except ValueError:
        return -1


def webhook(url: str, number: int) -> Webhook:
    """The webhook of a --notify URL; ValueError says what is wrong with it without showing it whole."""
    prefix, _, rest = url.partition("+")
    chosen = Format(prefix) if rest and prefix in {f.value for f in Format} else None
    url = rest if chosen else url
    parts = urlsplit(url)
    problem = None
    if parts.scheme not in ("http", "https"):
        problem = f"its scheme is {parts.scheme!r}, not http or https"
    elif not parts.hostname:
        problem = "it names no host"
    elif _port(parts) == -1:
        problem = "its port is not a number"
    if problem:
        raise ValueError(f"--notify #{number} is not a webhook URL: {problem}; give the webhook's whole URL, e.g. "
                         "https://hooks.slack.com/services/..., optionally prefixed slack+, discord+, ntfy+ or json+ "
                         "to choose the body")
    return Webhook(url=url, format=chosen or recognised(parts.hostname, parts.path), number=number)


def recognised(host: str, path: str) -> Format:
    host = host.lower()
    if host == "hooks.slack.com":
        return Format.SLACK
    if host in DISCORD_HOSTS and path.startswith("/api/webhooks/"):
        return Format.DISCORD
    if host == "ntfy.sh" or host.startswith("ntfy."):
        return Format.NTFY
    return Format.JSON


def body(notification: Notification, chosen: Format) -> Body:
    if chosen == Format.SLACK:
        # &, < and > escaped, so that a description cannot write <!channel> or a link
        text = _clipped(notification.text, SLACK_TEXT_CHARS)
        return _json({"text": text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")})
    if chosen == Format.DISCORD:
        # no mentions: a description that says @everyone must not ping a server
        return _json({"content": _clipped(notification.text, DISCORD_CONTENT_CHARS), "allowed_mentions": {"parse": []}})
    if chosen == Format.NTFY:
        text = notification.text.encode("utf-8")
        if len(text) > NTFY_BODY_BYTES:
            text = text[:NTFY_BODY_BYTES - 3].decode("utf-8", errors="ignore").encode("utf-8") + b"..."
        title = notification.title.encode("ascii", errors="replace").decode("ascii")
        return Body(text, {"Content-Type": "text/plain; charset=utf-8", "Title": title,
                           "Tags": notification.event.value})
    return _json(notification.model_dump(mode="json", exclude_none=True))


def _json(payload: dict) -> Body:
    return Body(json.dumps(payload).encode("utf-8"), {"Content-Type": "application/json"})


def _clipped(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit - 3] + "..."
