"""Orchard as OSWorld's machine provider: `desktop_env`'s own `DesktopEnv` (PyPI `desktop-env`),
its `PythonController`, `SetupController`, getters and metrics, unchanged, on an Orchard sandbox
with a desktop in it instead of a VM.

    from orchard_client.osworld import OrchardDesktopEnv
    env = OrchardDesktopEnv(url="http://127.0.0.1:8080", api_key="...", image="orchard-desktop:bookworm",
                            action_space="pyautogui", cache_dir="cache")
    obs = env.reset(task_config=task)          # an OSWorld task JSON: its config steps run
    obs, reward, done, info = env.step("import pyautogui; pyautogui.hotkey('ctrl', 's')")
    score = env.evaluate()                     # its evaluator: getters read the desktop, metrics score
    env.close()                                # the sandbox is deleted

How it fits: a start makes a sandbox (`POST /v1/sandboxes`), starts its desktop
(`POST /v1/sandboxes/{id}/desktop`) and opens a relay on this machine's loopback that passes
each of OSWorld's requests to `/v1/sandboxes/{id}/ports/5000/…` with the tenant's key (OSWorld's
client sends none, and its URLs are `http://ip:port/route`). A revert deletes the sandbox: the
next start is a fresh one from the image, as a VM's snapshot would be.

`DesktopEnv` takes providers from a closed list. `OrchardDesktopEnv` hands it Orchard's in the
place of the Docker provider's, whose contract Orchard's sandboxes share (a clean machine each
start, ports in `ip:server:chromium:vnc:vlc` form); `env.provider_name` then says "orchard".
Chromium's DevTools, VLC and VNC ports are not relayed (answered as port 0): OSWorld tasks that
need them (Chrome, VLC) do not run here yet.

OSWorld's metrics package imports every metric's dependencies when any metric is used (torch
through easyocr, librosa, playwright...), and its setup controller imports Playwright and
PyDrive for its Chrome and Google Drive steps. `defer_missing_imports()` (called when this module loads) lets
the heaviest of those (`DEFERRABLE`), when not installed, load as stand-ins that raise, naming
the package, only if a metric or setup step really uses them. The rest must be installed: see
the desktops page of Orchard's book for the list.
"""

from __future__ import annotations

import contextlib
import http.server
import json
import socketserver
import threading
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from ._osworld_imports import DEFERRABLE, defer_missing_imports  # noqa: F401 (re-exported)
from ._sandbox_api import SandboxApi

# The desktop service's port in the sandbox (OSWorld's).
SERVICE_PORT = 5000
# The longest one relayed request may take (OSWorld's `open_file` waits for an app's window).
RELAY_TIMEOUT = 330
# The largest request body relayed (the server refuses more).
MAX_RELAY_BODY = 8 << 20


class _Relay:
    """A loopback HTTP server passing every request to one sandbox port through Orchard."""

    def __init__(self, api: SandboxApi, sandbox: str, port: int):
        base = f"{api.url}/v1/sandboxes/{urllib.parse.quote(sandbox)}/ports/{port}"
        key = api.api_key

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:  # quiet: OSWorld logs its own calls
                pass

            def _relay(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                if length > MAX_RELAY_BODY:
                    self._answer(413, b"the body is larger than the relay takes", "text/plain")
                    return
                body = self.rfile.read(length) if length else None
                request = urllib.request.Request(base + self.path, data=body, method=self.command)
                for name in ("Content-Type", "Accept"):
                    if self.headers.get(name):
                        request.add_header(name, self.headers[name])
                if key:
                    request.add_header("Authorization", f"Bearer {key}")
                try:
                    with urllib.request.urlopen(request, timeout=RELAY_TIMEOUT) as response:
                        self._answer(response.status, response.read(), response.headers.get("Content-Type"))
                except urllib.error.HTTPError as e:
                    self._answer(e.code, e.read(), e.headers.get("Content-Type"))
                except (urllib.error.URLError, OSError) as e:
                    self._answer(502, f"orchard relay: {e}".encode(), "text/plain")

            def _answer(self, status: int, data: bytes, content_type: str | None) -> None:
                self.send_response(status)
                if content_type:
                    self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = _relay
            do_POST = _relay

        class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
            daemon_threads = True

        self._server = Server(("127.0.0.1", 0), Handler)
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, name="orchard-relay", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def _base_classes() -> tuple[type, type]:
    from desktop_env.providers.base import Provider, VMManager

    return Provider, VMManager


_Provider, _VMManager = _base_classes()


class OrchardProvider(_Provider):
    """OSWorld's `Provider` for Orchard: a "VM" is a sandbox of `path_to_vm` (an image name)
    with a desktop of `screen` size in it."""

    def __init__(self, api: SandboxApi, screen: tuple[int, int] = (1920, 1080),
                 sandbox: dict[str, Any] | None = None, desktop: dict[str, Any] | None = None):
        super().__init__(region=None)
        self.api = api
        self.screen = screen
        self.sandbox_fields = dict(sandbox or {})
        self.desktop_fields = dict(desktop or {})
        self.sandbox: str | None = None
        self._relay: _Relay | None = None

    def start_emulator(self, path_to_vm: str, headless: bool, os_type: str = "Ubuntu") -> None:
        self.stop_emulator(path_to_vm)
        body = {"image": path_to_vm, **self.sandbox_fields}
        self.sandbox = self.api.create(body)
        try:
            desktop = {"width": self.screen[0], "height": self.screen[1], "port": SERVICE_PORT, **self.desktop_fields}
            self.api.call("POST", SandboxApi._path(self.sandbox, "/desktop"), json_body=desktop)
            self._relay = _Relay(self.api, self.sandbox, int(desktop["port"]))
        except BaseException:
            self.stop_emulator(path_to_vm)
            raise

    def get_ip_address(self, path_to_vm: str) -> str:
        if self._relay is None:
            raise RuntimeError("orchard provider: the desktop is not started")
        # ip:server:chromium:vnc:vlc, as DesktopEnv reads the Docker provider's.
        return f"127.0.0.1:{self._relay.port}:0:0:0"

    def save_state(self, path_to_vm: str, snapshot_name: str) -> None:
        raise NotImplementedError("orchard provider: a sandbox starts from its image each time; there are no snapshots to save")

    def revert_to_snapshot(self, path_to_vm: str, snapshot_name: str) -> str:
        # DesktopEnv starts the emulator again after a revert: the next start is a fresh sandbox.
        self.stop_emulator(path_to_vm)
        return path_to_vm

    def stop_emulator(self, path_to_vm: str, *args: Any, **kwargs: Any) -> None:
        if self._relay is not None:
            self._relay.close()
            self._relay = None
        if self.sandbox is not None:
            sandbox, self.sandbox = self.sandbox, None
            self.api.delete(sandbox)


class OrchardVMManager(_VMManager):
    """Nothing to register: every start makes its own sandbox. The "VM path" is the image."""

    def __init__(self, image: str):
        self.image = image

    def initialize_registry(self, **kwargs: Any) -> None:
        pass

    def add_vm(self, vm_path: str, **kwargs: Any) -> None:
        pass

    def delete_vm(self, vm_path: str, **kwargs: Any) -> None:
        pass

    def occupy_vm(self, vm_path: str, pid: int, **kwargs: Any) -> None:
        pass

    def list_free_vms(self, **kwargs: Any) -> list[str]:
        return [self.image]

    def check_and_clean(self, **kwargs: Any) -> None:
        pass

    def get_vm_path(self, **kwargs: Any) -> str:
        return self.image


@contextlib.contextmanager
def _orchard_in_place_of_docker(manager: OrchardVMManager, provider: OrchardProvider):
    import desktop_env.desktop_env as module

    original = module.create_vm_manager_and_provider

    def create(provider_name: str, region: str, use_proxy: bool = False):
        if provider_name == "docker":
            return manager, provider
        return original(provider_name, region, use_proxy)

    module.create_vm_manager_and_provider = create
    try:
        yield
    finally:
        module.create_vm_manager_and_provider = original


def _desktop_env_class() -> type:
    defer_missing_imports()
    from desktop_env.desktop_env import DesktopEnv

    return DesktopEnv


class OrchardDesktopEnv(_desktop_env_class()):  # type: ignore[misc]
    """OSWorld's `DesktopEnv` on an Orchard sandbox (see the module's doc). Every keyword of
    `DesktopEnv` but the provider's is taken as it is."""

    def __init__(self, *, url: str | None = None, api_key: str | None = None, image: str = "host",
                 sandbox: dict[str, Any] | None = None, desktop: dict[str, Any] | None = None,
                 **kwargs: Any):
        for taken in ("provider_name", "path_to_vm", "region"):
            if taken in kwargs:
                raise TypeError(f"OrchardDesktopEnv: {taken} is Orchard's to set (give image= instead)")
        screen = kwargs.get("screen_size", (1920, 1080))
        api = SandboxApi(url, api_key)
        provider = OrchardProvider(api, tuple(screen), sandbox, desktop)
        manager = OrchardVMManager(image)
        with _orchard_in_place_of_docker(manager, provider):
            super().__init__(provider_name="docker", path_to_vm=image, **kwargs)
        self.provider_name = "orchard"

    @property
    def sandbox_id(self) -> str | None:
        """The sandbox the desktop runs in now."""
        return self.provider.sandbox


def load_task(path: str) -> dict[str, Any]:
    """An OSWorld task JSON."""
    with open(path, encoding="utf-8") as f:
        return json.load(f)
