"""The MCP servers file in the config folder: read bounded, written atomically and owner-only (its ``env`` can
hold tokens), never written over when it could not be read."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

from app.core import safe_json
from app.core.mcp.config import McpConfig, McpConfigError
from app.services.paths import PRIVATE_DIR, open_private, owner_only

log = logging.getLogger("app.services.mcp")

MAX_CONFIG_BYTES = 1024 * 1024  # a real file is a few KiB


class McpConfigFile:
    """``load()`` the servers, ``save(config)`` them. A file that cannot be used is left exactly as it is:
    ``problem`` says why, ``load`` gives no servers at all and ``save`` refuses."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.problem: str | None = None

    def load(self) -> McpConfig:
        """The configured servers; the built-in one alone when there is no file yet. Blocking (file I/O)."""
        self.problem = None
        try:
            data = safe_json.load_file(self.path, what=self.path.name, max_bytes=MAX_CONFIG_BYTES)
            config = McpConfig.from_dict(data, source=str(self.path))
        except FileNotFoundError:
            return McpConfig()
        except (OSError, ValueError) as exc:  # ValueError: JsonError, UserFileError, McpConfigError
            detail = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            self.problem = (
                f"The MCP servers file {self.path} could not be read ({detail}). No MCP server is started until "
                "it is fixed or removed; the app has left it as it is."
            )
            log.error("%s", self.problem)
            return McpConfig([])
        try:
            owner_only(self.path)  # an earlier copy made readable by others
        except OSError as exc:
            log.info("could not make %s owner-only: %s", self.path, exc.strerror or exc)
        return config

    def save(self, config: McpConfig) -> None:
        """Write ``config`` atomically, owner-only; a ``McpConfigError`` when the file on disk could not be read."""
        if self.problem is not None:
            raise McpConfigError(f"{self.problem} Nothing was saved.")
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=PRIVATE_DIR)
        tmp = self.path.with_name(self.path.name + ".tmp")
        with open_private(tmp) as out:
            out.write(json.dumps(config.to_dict(), indent=2))
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, self.path)
