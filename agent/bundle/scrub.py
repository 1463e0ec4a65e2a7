"""What must not leave the machine in a bundle: API keys and tokens, and the paths that name this machine's user
and folders."""

from __future__ import annotations

import os
import re
from pathlib import Path

KEY_PATTERNS = (re.compile(r"sk-ant-[A-Za-z0-9_\-]{8,}"), re.compile(r"\bsk-[A-Za-z0-9_\-]{16,}"),
                re.compile(r"(?i)\bbearer\s+[A-Za-z0-9._\-]{8,}"))
SECRET_NAMES = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD)", re.IGNORECASE)
MIN_SECRET_CHARS = 8


class Scrubber:
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
