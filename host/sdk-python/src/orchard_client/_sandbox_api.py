"""Orchard's sandbox API (`/v1/sandboxes`), for the adapters that put the field's runners on
Orchard sandboxes (Harbor's environment, Inspect's sandbox). Standard library only; every call
is blocking (the adapters run them off their event loops)."""

from __future__ import annotations

import io
import json
import os
import tarfile
import urllib.parse
from pathlib import Path
from typing import Any

from .client import OrchardError, send

# Most output kept from each stream of a command (the rest is spilled to a file in the sandbox).
OUTPUT_KEEP = 8 << 20
# Orchard's longest command (a day): what "no timeout" becomes.
NO_TIMEOUT = 86_400


class SandboxApi:
    """One server, one tenant's key."""

    def __init__(self, url: str | None = None, api_key: str | None = None):
        url = url or os.environ.get("ORCHARD_URL")
        if not url:
            raise ValueError("the Orchard server is not named: give its URL, or set ORCHARD_URL")
        self.url = url.rstrip("/")
        self.api_key = api_key or os.environ.get("ORCHARD_API_KEY")

    def call(self, method: str, path: str, body: bytes | None = None, *, json_body: Any = None,
             timeout: float = 120.0) -> bytes:
        data = json.dumps(json_body).encode() if json_body is not None else body
        headers = []
        if data is not None:
            headers.append(("Content-Type", "application/json" if json_body is not None else "application/octet-stream"))
        if self.api_key:
            headers.append(("Authorization", f"Bearer {self.api_key}"))
        with send(self.url + path, method, data, headers, timeout) as response:
            return response.read()

    @staticmethod
    def _path(sandbox: str, suffix: str, **query: Any) -> str:
        encoded = urllib.parse.urlencode({k: v for k, v in query.items() if v is not None})
        return f"/v1/sandboxes/{urllib.parse.quote(sandbox)}{suffix}" + (f"?{encoded}" if encoded else "")

    def create(self, body: dict[str, Any]) -> str:
        """Makes a sandbox (`POST /v1/sandboxes`); answers its id."""
        return json.loads(self.call("POST", "/v1/sandboxes", json_body=body))["sandbox_id"]

    def delete(self, sandbox: str) -> None:
        """Deletes a sandbox; one already gone is not an error."""
        try:
            self.call("DELETE", self._path(sandbox, ""))
        except OrchardError as e:
            if e.status != 404:
                raise

    def exec(self, sandbox: str, command: str | list[str], *, cwd: str | None = None,
             env: dict[str, str] | None = None, stdin: str | None = None, timeout: int | None = None,
             output_limit: tuple[int, int] = (OUTPUT_KEEP, OUTPUT_KEEP)) -> dict[str, Any]:
        """Runs a command (a string through the shell, a list without one); answers Orchard's
        result (`exit_code`, `stdout`/`stderr` with `text` and `truncated`, `timed_out`)."""
        seconds = timeout if timeout else NO_TIMEOUT
        body: dict[str, Any] = {
            "command": command,
            "timeout_seconds": seconds,
            "env": env or {},
            "output_limit": {"head_bytes": output_limit[0], "tail_bytes": output_limit[1]},
        }
        if cwd:
            body["cwd"] = cwd
        if stdin is not None:
            body["stdin"] = stdin
        return json.loads(self.call("POST", self._path(sandbox, "/exec"), json_body=body, timeout=seconds + 120))

    def write_file(self, sandbox: str, path: str, data: bytes) -> None:
        """Writes a file, making its parents."""
        self.call("PUT", self._path(sandbox, "/files", path=path, create_parents="true"), data, timeout=600)

    def read_file(self, sandbox: str, path: str) -> bytes:
        """A file's bytes."""
        return self.call("GET", self._path(sandbox, "/files", path=path), timeout=600)

    def stat(self, sandbox: str, path: str) -> dict[str, Any]:
        """A file's metadata (`kind`, `size`, ...)."""
        return json.loads(self.call("GET", self._path(sandbox, "/files/stat", path=path)))

    def upload_dir(self, sandbox: str, local: Path, target: str) -> None:
        """A local directory's contents unpacked at `target`."""
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w") as tar:
            for child in sorted(local.iterdir()):
                tar.add(child, arcname=child.name)
        self.call("PUT", self._path(sandbox, "/tar", path=target), buffer.getvalue(), timeout=600)

    def download_dir(self, sandbox: str, source: str, local: Path) -> None:
        """A sandbox directory unpacked into `local` (never outside it, never a device: what a
        sandbox wrote is not trusted)."""
        data = self.call("GET", self._path(sandbox, "/tar", path=source), timeout=600)
        local.mkdir(parents=True, exist_ok=True)
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:*") as tar:
            tar.extractall(local, filter="data")
