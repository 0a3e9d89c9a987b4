"""An OSWorld task's evaluator, run by its verifier in the task's sandbox after the agent: OSWorld's
own `DesktopEnv.evaluate` (its postconfig steps, getters and metrics), with the controllers
pointed at the desktop service there. Writes the score to /logs/verifier/reward.txt.

The files the converter found in the local mirror it was given are in ./cache, where OSWorld's
`cloud_file` getter finds them without downloading.

Before anything is read, the service on the port must be Orchard's desktop service: the process
listening there runs Orchard's agent program from its read-only mount. A server of the agent
under test on the port (answering whatever it likes) scores 0, saying so.
"""

import json
import os
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import _osworld_imports  # noqa: E402

_osworld_imports.defer_missing_imports()
from desktop_env.controllers.python import PythonController  # noqa: E402
from desktop_env.controllers.setup import SetupController  # noqa: E402
from desktop_env.desktop_env import DesktopEnv  # noqa: E402

with open(os.path.join(HERE, "osworld_task.json")) as f:
    task = json.load(f)
port = int(os.environ.get("OSWORLD_PORT", "5000"))


def reward(score: float, why: str) -> None:
    print(f"osworld {task['id']}: {why}")
    os.makedirs("/logs/verifier", exist_ok=True)
    with open("/logs/verifier/reward.txt", "w") as f:
        f.write(f"{score}\n")


def exe(pid: int) -> str:
    try:
        return os.readlink(f"/proc/{pid}/exe")
    except OSError:
        return ""


def listener(port: int):
    """The pid listening on 127.0.0.1:port (or all addresses), from /proc/net/tcp and fds."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = open(table).read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            cols = row.split()
            if cols[3] == "0A" and int(cols[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(f"socket:[{cols[9]}]")
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                if os.readlink(f"/proc/{pid}/fd/{fd}") in inodes:
                    return int(pid)
        except OSError:
            continue
    return None


# Where Orchard puts its agent's program, read-only: the local backend, then Kubernetes pods.
AGENT_PROGRAMS = ("/.orchard/agent", "/.orchard/bin/orchard-agent")


def orchards_program(path: str) -> bool:
    """Orchard's agent program, on its read-only mount (nothing in the sandbox can replace it)."""
    try:
        return path in AGENT_PROGRAMS and bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except OSError:
        return False


serving = listener(port)
if serving is None or not orchards_program(exe(serving)):
    reward(0.0, f"the desktop service on port {port} is not Orchard's (the listener: "
                f"{exe(serving) or 'unknown' if serving else 'none'}): not graded from it")
    sys.exit(0)
cache = tempfile.mkdtemp(prefix="osworld-eval-")

# DesktopEnv without a provider: its evaluation needs only its controllers and its task.
env = DesktopEnv.__new__(DesktopEnv)
env.vm_ip, env.server_port, env.chromium_port, env.vnc_port, env.vlc_port = "127.0.0.1", port, 9222, 8006, 8080
env.enable_proxy = env.current_use_proxy = False
env.is_environment_used = True
env.action_history = []
env.cache_dir_base = cache
env.controller = PythonController(vm_ip=env.vm_ip, server_port=port)
env.setup_controller = SetupController(vm_ip=env.vm_ip, server_port=port, cache_dir=cache)
env._set_task_info(task)
env.setup_controller.reset_cache_dir(env.cache_dir)
mirrored = os.path.join(HERE, "cache")
if os.path.isdir(mirrored):
    for name in os.listdir(mirrored):
        shutil.copy(os.path.join(mirrored, name), os.path.join(env.cache_dir, name))

score = float(env.evaluate())
reward(score, f"{task['evaluator']['func']} scored {score}")
