"""Orchard sandboxes for Inspect AI: `sandbox="orchard"` (or `("orchard", OrchardSandboxConfig(...))`).

Registered with Inspect through the `inspect_ai` entry point of this package, so an installed
client is all a task needs. Each sample gets its own sandbox, made over Orchard's REST API when the
sample starts and deleted when it ends; relative paths resolve against the sample's working
directory (`workdir`, default `/workspace`).

Configuration: an `OrchardSandboxConfig`, or nothing (then `ORCHARD_URL` and `ORCHARD_API_KEY`).
What Inspect asks that a sandbox cannot give is refused by name: commands run as root, so
another `user` raises `SandboxUserUnsupportedError`.
"""

from __future__ import annotations

import asyncio
import shlex
from typing import Any, Literal, Union, overload

from inspect_ai.util import (
    ExecResult,
    OutputLimitExceededError,
    SandboxConnection,
    SandboxEnvironment,
    SandboxEnvironmentConfigType,
    sandboxenv,
)
from inspect_ai.util._sandbox.environment import SandboxUserUnsupportedError
from pydantic import BaseModel, ConfigDict

from ._sandbox_api import SandboxApi
from .client import OrchardError

# Inspect's default cap on each output stream and on files read (its environment variables
# change them, as for its own providers).
_MAX_EXEC_OUTPUT = 10 << 20
_MAX_READ_FILE = 100 << 20


class OrchardSandboxConfig(BaseModel):
    """How samples' sandboxes are made."""

    model_config = ConfigDict(extra="forbid")

    url: str | None = None
    """The Orchard server (default `$ORCHARD_URL`)."""
    api_key: str | None = None
    """A tenant's key (default `$ORCHARD_API_KEY`)."""
    image: str = "host"
    """The sandboxes' image."""
    workdir: str = "/workspace"
    """Where relative paths and commands start."""
    network: bool = False
    """Open the sandbox's network (Orchard's default is loopback only)."""
    memory: str | None = None
    """A memory limit (`"2Gi"`)."""
    cpu: float | None = None
    """A CPU limit in cores."""
    ttl_seconds: int = 3600
    """Idle seconds before Orchard reaps a sandbox a crashed eval left."""


def _config(config: SandboxEnvironmentConfigType | None) -> OrchardSandboxConfig:
    if config is None:
        return OrchardSandboxConfig()
    if isinstance(config, OrchardSandboxConfig):
        return config
    if isinstance(config, BaseModel):
        return OrchardSandboxConfig(**config.model_dump())
    raise ValueError(f"orchard sandbox: config must be an OrchardSandboxConfig, not {config!r}")


def _is_root(user: str | None) -> bool:
    return user in (None, "root", "0")


@sandboxenv(name="orchard")
class OrchardSandboxEnvironment(SandboxEnvironment):
    """One sample's Orchard sandbox."""

    def __init__(self, api: SandboxApi, sandbox_id: str, config: OrchardSandboxConfig):
        super().__init__()
        self._api = api
        self.sandbox_id = sandbox_id
        self._config = config

    def _resolve(self, path: str) -> str:
        return path if path.startswith("/") else f"{self._config.workdir.rstrip('/')}/{path}"

    @classmethod
    def config_deserialize(cls, config: dict[str, Any]) -> BaseModel:
        return OrchardSandboxConfig(**config)

    @classmethod
    async def sample_init(
        cls, task_name: str, config: SandboxEnvironmentConfigType | None, metadata: dict[str, str]
    ) -> dict[str, SandboxEnvironment]:
        conf = _config(config)
        api = SandboxApi(conf.url, conf.api_key)
        body: dict[str, Any] = {
            "image": conf.image,
            "block_network": not conf.network,
            "workdir": conf.workdir,
            "timeout": conf.ttl_seconds,
        }
        if conf.memory:
            body["memory"] = conf.memory
        if conf.cpu:
            body["cpu"] = conf.cpu
        sandbox_id = await asyncio.to_thread(api.create, body)
        return {"default": cls(api, sandbox_id, conf)}

    @classmethod
    async def sample_cleanup(
        cls,
        task_name: str,
        config: SandboxEnvironmentConfigType | None,
        environments: dict[str, SandboxEnvironment],
        interrupted: bool,
    ) -> None:
        for environment in environments.values():
            if isinstance(environment, OrchardSandboxEnvironment):
                await asyncio.to_thread(environment._api.delete, environment.sandbox_id)

    async def exec(
        self,
        cmd: list[str],
        input: str | bytes | None = None,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        user: str | None = None,
        timeout: int | None = None,
        timeout_retry: bool = True,
        concurrency: bool = True,
    ) -> ExecResult[str]:
        if not _is_root(user):
            raise SandboxUserUnsupportedError(f"orchard sandbox: commands run as root, not as {user!r}")
        stdin = input.decode() if isinstance(input, bytes) else input
        try:
            answer = await asyncio.to_thread(
                self._api.exec,
                self.sandbox_id,
                list(cmd),
                cwd=self._resolve(cwd) if cwd else self._config.workdir,
                env=env,
                stdin=stdin,
                timeout=timeout,
                # Over the limit, the output's end is kept (what Inspect allows a provider).
                output_limit=(0, _MAX_EXEC_OUTPUT),
            )
        except OrchardError as e:
            if e.status == 404:
                raise FileNotFoundError(e.detail) from None
            raise
        if answer.get("timed_out"):
            raise TimeoutError(f"orchard sandbox: {shlex.join(cmd)} timed out after {timeout} s")
        code = answer["exit_code"]
        return ExecResult(
            success=code == 0, returncode=code, stdout=answer["stdout"]["text"], stderr=answer["stderr"]["text"]
        )

    async def write_file(self, file: str, contents: str | bytes) -> None:
        data = contents.encode() if isinstance(contents, str) else contents
        path = self._resolve(file)
        try:
            await asyncio.to_thread(self._api.write_file, self.sandbox_id, path, data)
        except OrchardError as e:
            if "directory" in e.detail.lower() and "is a directory" in e.detail.lower():
                raise IsADirectoryError(path) from None
            if e.status == 403:
                raise PermissionError(e.detail) from None
            raise

    @overload
    async def read_file(self, file: str, text: Literal[True] = True) -> str: ...

    @overload
    async def read_file(self, file: str, text: Literal[False]) -> bytes: ...

    async def read_file(self, file: str, text: bool = True) -> Union[str, bytes]:
        path = self._resolve(file)
        try:
            info = await asyncio.to_thread(self._api.stat, self.sandbox_id, path)
        except OrchardError as e:
            if e.status == 404:
                raise FileNotFoundError(path) from None
            raise
        if info.get("kind") == "directory":
            raise IsADirectoryError(path)
        if info.get("size", 0) > _MAX_READ_FILE:
            raise OutputLimitExceededError(limit_str=f"{_MAX_READ_FILE} bytes", truncated_output=None)
        data = await asyncio.to_thread(self._api.read_file, self.sandbox_id, path)
        # Text keeps its newlines as they are (Inspect asks for `newline=""`).
        return data.decode("utf-8") if text else data

    async def connection(self, *, user: str | None = None) -> SandboxConnection:
        command = f"python -m orchard_client.shell {self.sandbox_id}"
        return SandboxConnection(type="orchard", command=command)
