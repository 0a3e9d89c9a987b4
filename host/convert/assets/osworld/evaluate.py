"""An OSWorld task's evaluator, run by its verifier in the task's sandbox after the agent: OSWorld's
own `DesktopEnv.evaluate` (its postconfig steps, getters and metrics), with the controllers
pointed at the desktop service there. Writes the score to /logs/verifier/reward.txt.

The files the converter found in the local mirror it was given are in ./cache, where OSWorld's
`cloud_file` getter finds them without downloading.
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
print(f"osworld {task['id']}: {task['evaluator']['func']} scored {score}")
os.makedirs("/logs/verifier", exist_ok=True)
with open("/logs/verifier/reward.txt", "w") as f:
    f.write(f"{score}\n")
