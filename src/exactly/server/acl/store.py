"""The ACLs on disk: one JSON file in the log dir, replaced atomically on every change.

Written to a temporary file, fsynced, renamed over the old one, then the directory is fsynced:
after a crash the file holds either the old set or the new one, never a mix.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path

from exactly.log.files import write_atomically
from exactly.server.acl.model import AclBinding

FILE_NAME = "acls.json"
FORMAT_VERSION = 1


class AclStoreError(RuntimeError):
    """The ACL file cannot be read; the message says which file and why."""


class AclStore:
    def __init__(self, log_dir: str | os.PathLike[str]) -> None:
        self.path = Path(log_dir) / FILE_NAME

    def load(self) -> list[AclBinding]:
        try:
            text = self.path.read_text("utf-8")
        except FileNotFoundError:
            return []
        try:
            data = json.loads(text)
            if data.get("version") != FORMAT_VERSION:
                raise ValueError(f"unknown format version {data.get('version')!r}")
            return [AclBinding.from_json(entry) for entry in data["acls"]]
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise AclStoreError(
                f"ACL file {str(self.path)!r} is damaged ({exc}); restore it from a backup or "
                "remove it to start with no ACLs") from None

    def save(self, bindings: Iterable[AclBinding]) -> None:
        data = {"version": FORMAT_VERSION, "acls": [b.to_json() for b in sorted(bindings)]}
        write_atomically(self.path, json.dumps(data, indent=1) + "\n")
