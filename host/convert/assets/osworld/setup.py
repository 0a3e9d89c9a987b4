"""An OSWorld task's config steps, run in its own sandbox by OSWorld's own SetupController
against the desktop service there, before the agent starts (the task's CMD). Writes
/tmp/osworld-setup.ok, or /tmp/osworld-setup.failed with why.

`setup.py --wait` (the task's healthcheck) waits for one of them: 0 when set up, 1 (printing
why) when the setup failed, and gives up after WAIT seconds.
"""

import json
import os
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
OK, FAILED = "/tmp/osworld-setup.ok", "/tmp/osworld-setup.failed"
WAIT = 600


def wait() -> int:
    started = time.time()
    while time.time() - started < WAIT:
        if os.path.exists(OK):
            return 0
        if os.path.exists(FAILED):
            with open(FAILED) as f:
                print(f.read())
            return 1
        time.sleep(0.2)
    print(f"the OSWorld setup did not finish within {WAIT} s")
    return 1


def setup() -> int:
    sys.path.insert(0, HERE)
    port = int(os.environ.get("OSWORLD_PORT", "5000"))
    try:
        # Inside the try: a Python without desktop_env fails the setup by name, at once.
        import _osworld_imports

        _osworld_imports.defer_missing_imports()
        from desktop_env.controllers.setup import SetupController

        with open(os.path.join(HERE, "task.json")) as f:
            task = json.load(f)
        controller = SetupController(vm_ip="127.0.0.1", server_port=port, cache_dir="/tmp/osworld-cache",
                                     screen_width=int(os.environ.get("OSWORLD_WIDTH", "1920")),
                                     screen_height=int(os.environ.get("OSWORLD_HEIGHT", "1080")))
        if not controller.setup(task.get("config", [])):
            raise RuntimeError(f"the desktop service on port {port} did not answer")
    except Exception:
        why = "the OSWorld setup failed:\n" + traceback.format_exc()[-4000:]
        print(why, file=sys.stderr)
        with open(FAILED, "w") as f:
            f.write(why)
        return 1
    with open(OK, "w") as f:
        f.write("ok\n")
    return 0


if __name__ == "__main__":
    sys.exit(wait() if sys.argv[1:] == ["--wait"] else setup())
