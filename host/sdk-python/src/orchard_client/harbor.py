"""Orchard sandboxes as a Harbor environment.

    harbor run -p TASK -a oracle --env orchard_client.harbor:OrchardEnvironment \\
        --ek url=http://127.0.0.1:8080 --ek api_key=KEY

Each trial's environment is one sandbox made over Orchard's REST API (`/v1/sandboxes`), so Harbor's
own agents and verifier run unchanged on Orchard's local or Kubernetes backend, with its warm
pools, quotas and limits. What Harbor asks is honoured or refused, never dropped:

- the image is the task's `docker_image`, else the `image` option (default `host`); an
  `environment/Dockerfile` is not built by a daemon but replayed: its WORKDIR and ENV set the
  sandbox's, its COPY lines upload from the build context, and its RUN lines run in the started
  sandbox in order (a failing one fails the start, naming the line). `docker-compose.yaml`
  environments are refused;
- network policies map to Orchard's (no network, or an allowlist of hosts, IPs and CIDRs);
- CPU, memory and storage become the sandbox's limits; GPUs and TPUs are refused;
- `exec` runs `bash -c` with the merged environment, as `user` through `runuser` when one is named.

Options (`--ek key=value`): `url` (or `ORCHARD_URL`), `api_key` (or `ORCHARD_API_KEY`), `image`,
`replay_run` (run the Dockerfile's RUN lines; default true), `ttl_seconds` (idle expiry, default 3600).
"""

from __future__ import annotations

import asyncio
import json
import shlex
from pathlib import Path
from typing import Any

from harbor.environments.base import BaseEnvironment, ExecResult, SandboxBuildFailedError
from harbor.environments.capabilities import EnvironmentCapabilities, EnvironmentResourceCapabilities
from harbor.environments.options import EnvironmentOptions
from harbor.models.task.config import NetworkMode
from harbor.models.trial.paths import EnvironmentPaths
from pydantic import Field

from ._sandbox_api import SandboxApi


class OrchardOptions(EnvironmentOptions):
    """`--ek` options of the Orchard environment."""

    url: str | None = Field(default=None, description="The Orchard server (default: $ORCHARD_URL).")
    api_key: str | None = Field(default=None, description="A tenant's API key (default: $ORCHARD_API_KEY).")
    image: str = Field(default="host", description="The image of tasks that name no docker_image.")
    replay_run: bool = Field(default=True, description="Run the Dockerfile's RUN lines in the started sandbox.")
    ttl_seconds: int = Field(default=3600, ge=1, description="Idle seconds before Orchard reaps the sandbox.")


def parse_dockerfile(text: str) -> dict[str, Any]:
    """What is replayed of a Dockerfile: WORKDIR, ENV, local COPY/ADD and RUN, in order.

    Continuation lines are joined; `COPY --from=…` and remote ADD sources are refused because they
    need a builder. Relative WORKDIRs resolve against the previous one, as Docker does.
    """
    lines: list[str] = []
    pending = ""
    for raw in text.splitlines():
        stripped = raw.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        lines.append(pending + stripped)
        pending = ""
    if pending.strip():
        lines.append(pending)
    workdir = "/"
    steps: list[tuple[str, Any]] = []
    env: dict[str, str] = {}
    for line in lines:
        word, _, rest = line.partition(" ")
        word, rest = word.upper(), rest.strip()
        if word == "WORKDIR":
            workdir = rest if rest.startswith("/") else f"{workdir.rstrip('/')}/{rest}"
            steps.append(("workdir", workdir))
        elif word == "ENV":
            if "=" in rest.split(" ", 1)[0]:
                for pair in shlex.split(rest):
                    key, _, value = pair.partition("=")
                    env[key] = value
            else:
                key, _, value = rest.partition(" ")
                env[key] = value.strip()
        elif word in ("COPY", "ADD"):
            words = shlex.split(rest)
            if any(w.startswith("--from") for w in words):
                raise SandboxBuildFailedError(f"Dockerfile: {line!r}: COPY --from needs an image builder")
            words = [w for w in words if not w.startswith("--")]
            if rest.startswith("["):
                words = json.loads(rest)
            *sources, dest = words
            if any("://" in s for s in sources):
                raise SandboxBuildFailedError(f"Dockerfile: {line!r}: remote ADD sources are not fetched")
            if not dest.startswith("/"):
                dest = f"{workdir.rstrip('/')}/{dest}"
            steps.append(("copy", (sources, dest, dest.endswith("/") or len(sources) > 1)))
        elif word == "RUN":
            command = " ".join(json.loads(rest)) if rest.startswith("[") else rest
            steps.append(("run", (command, workdir, dict(env))))
    return {"workdir": workdir if workdir != "/" else None, "env": env, "steps": steps}


class OrchardEnvironment(BaseEnvironment):
    """A Harbor environment whose container is an Orchard sandbox."""

    options_model = OrchardOptions

    def __init__(self, *args: Any, **kwargs: Any):
        self._sandbox_id: str | None = None
        self._dockerfile: dict[str, Any] | None = None
        super().__init__(*args, **kwargs)
        options: OrchardOptions = self.options  # type: ignore[assignment]
        try:
            self._api = SandboxApi(options.url, options.api_key)
        except ValueError as e:
            raise ValueError(f"orchard environment: {e} (--ek url=…)") from None

    @staticmethod
    def type() -> str:
        return "orchard"

    @property
    def capabilities(self) -> EnvironmentCapabilities:
        return EnvironmentCapabilities(
            disable_internet=True,
            network_allowlist=True,
            network_allowlist_hostnames=True,
            network_allowlist_ipv4_addresses=True,
            network_allowlist_ipv6_addresses=True,
            network_allowlist_ipv4_cidrs=True,
            network_allowlist_ipv6_cidrs=True,
        )

    @classmethod
    def resource_capabilities(cls) -> EnvironmentResourceCapabilities:
        return EnvironmentResourceCapabilities(cpu_limit=True, memory_limit=True)

    def _validate_definition(self) -> None:
        if (self.environment_dir / "docker-compose.yaml").exists() or (
            self.environment_dir / "docker-compose.yml"
        ).exists():
            raise ValueError(
                "orchard environment: docker-compose task environments are not supported "
                "(one sandbox per trial); use a Dockerfile or docker_image"
            )
        dockerfile = self.environment_dir / "Dockerfile"
        if not self.task_env_config.docker_image and dockerfile.is_file():
            self._dockerfile = parse_dockerfile(dockerfile.read_text())

    def _id(self) -> str:
        if self._sandbox_id is None:
            raise RuntimeError("orchard environment: the sandbox is not started")
        return self._sandbox_id

    # --- lifecycle ---

    async def start(self, force_build: bool) -> None:
        options: OrchardOptions = self.options  # type: ignore[assignment]
        config = self.task_env_config
        policy = self.network_policy
        body: dict[str, Any] = {
            "image": config.docker_image or options.image,
            "block_network": policy.network_mode == NetworkMode.NO_NETWORK,
            "timeout": options.ttl_seconds,
            "env": {**(self._dockerfile or {}).get("env", {}), **self._startup_env()},
        }
        if policy.network_mode == NetworkMode.ALLOWLIST:
            body["network_allow"] = list(policy.allowed_hosts)
        workdir = config.workdir or (self._dockerfile or {}).get("workdir")
        if workdir:
            body["workdir"] = workdir
        if (cpus := self._effective_cpus) is not None:
            body["cpu"] = cpus
        if (memory := self._effective_memory_mb) is not None:
            body["memory"] = f"{memory}Mi"
        if (storage := self._effective_storage_mb) is not None:
            body["disk"] = f"{storage}Mi"
        self._sandbox_id = await asyncio.to_thread(self._api.create, body)
        self.logger.debug(f"Orchard sandbox {self._sandbox_id} ({body['image']})")
        # Where Harbor's agents and verifier write, made as a container's mounts would be.
        paths = EnvironmentPaths.for_os(self.os)
        await self.ensure_dirs([paths.agent_dir, paths.verifier_dir, paths.artifacts_dir])
        if self._dockerfile:
            await self._replay_dockerfile(self._dockerfile)
        await self._upload_environment_dir_after_start()

    async def _replay_dockerfile(self, dockerfile: dict[str, Any]) -> None:
        options: OrchardOptions = self.options  # type: ignore[assignment]
        for kind, step in dockerfile["steps"]:
            if kind == "workdir":
                await self.exec(f"mkdir -p {shlex.quote(step)}")
            elif kind == "copy":
                sources, dest, into_dir = step
                for source in sources:
                    local = (self.environment_dir / source).resolve()
                    if not local.is_relative_to(self.environment_dir.resolve()):
                        raise SandboxBuildFailedError(f"Dockerfile: COPY {source}: outside the build context")
                    if local.is_dir():
                        await self.upload_dir(local, dest)
                    elif local.is_file():
                        target = f"{dest.rstrip('/')}/{local.name}" if into_dir else dest
                        await self.upload_file(local, target)
                    else:
                        raise SandboxBuildFailedError(f"Dockerfile: COPY {source}: no such file in environment/")
            elif kind == "run" and options.replay_run:
                command, cwd, env = step
                result = await self.exec(command, cwd=cwd, env=env, timeout_sec=int(self.task_env_config.build_timeout_sec))
                if result.return_code != 0:
                    output = (result.stderr or result.stdout or "").strip()[-2000:]
                    raise SandboxBuildFailedError(
                        f"Dockerfile: RUN {command!r} exited {result.return_code} in the Orchard sandbox:\n{output}"
                    )

    async def stop(self, delete: bool) -> None:
        if self._sandbox_id is None or not delete:
            return
        await asyncio.to_thread(self._api.delete, self._sandbox_id)
        self._sandbox_id = None

    # --- commands ---

    async def exec(
        self,
        command: str,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        timeout_sec: int | None = None,
        user: str | int | None = None,
    ) -> ExecResult:
        user = self._resolve_user(user)
        if user not in (None, "root", 0, "0"):
            # The wrapper runs as root: found on a fixed system PATH, never the image's.
            command = (
                f"PATH=/usr/sbin:/usr/bin:/sbin:/bin exec runuser -u {shlex.quote(str(user))} -- "
                f"bash -c {shlex.quote(command)}"
            )
        answer = await asyncio.to_thread(
            self._api.exec, self._id(), command, cwd=cwd, env=self._merge_env(env), timeout=timeout_sec
        )
        if answer.get("timed_out"):
            raise RuntimeError(f"Command timed out after {timeout_sec} seconds")
        return ExecResult(
            stdout=answer["stdout"]["text"], stderr=answer["stderr"]["text"], return_code=answer["exit_code"]
        )

    # --- files ---

    async def upload_file(self, source_path: Path | str, target_path: str) -> None:
        data = await asyncio.to_thread(Path(source_path).read_bytes)
        await asyncio.to_thread(self._api.write_file, self._id(), target_path, data)

    async def upload_dir(self, source_dir: Path | str, target_dir: str) -> None:
        await asyncio.to_thread(self._api.upload_dir, self._id(), Path(source_dir), target_dir)

    async def download_file(self, source_path: str, target_path: Path | str) -> None:
        data = await asyncio.to_thread(self._api.read_file, self._id(), source_path)
        target = Path(target_path)
        target.parent.mkdir(parents=True, exist_ok=True)
        await asyncio.to_thread(target.write_bytes, data)

    async def download_dir(self, source_dir: str, target_dir: Path | str) -> None:
        await asyncio.to_thread(self._api.download_dir, self._id(), source_dir, Path(target_dir))
