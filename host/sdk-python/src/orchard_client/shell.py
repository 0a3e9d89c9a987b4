"""A line-mode shell in an Orchard sandbox: `python -m orchard_client.shell SANDBOX_ID`.

Each line runs with `bash -c` in the sandbox's working directory (`cd` carries over); its output is
printed when it ends. Reads `ORCHARD_URL` and `ORCHARD_API_KEY`. What Inspect's `connection()`
names for a human to look inside a sample's sandbox."""

from __future__ import annotations

import shlex
import sys

from ._sandbox_api import SandboxApi
from .client import OrchardError


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m orchard_client.shell SANDBOX_ID", file=sys.stderr)
        return 2
    api, sandbox = SandboxApi(), argv[0]
    cwd = None
    while True:
        try:
            line = input(f"{sandbox}:{cwd or '~'}$ ")
        except EOFError:
            return 0
        if not line.strip():
            continue
        # The directory a command ends in is where the next one starts.
        script = f"{line}\nprintf '\\n\\0%s' \"$PWD\""
        try:
            result = api.exec(sandbox, ["bash", "-c", script], cwd=cwd, timeout=3600)
        except OrchardError as e:
            print(e, file=sys.stderr)
            continue
        out, _, where = result["stdout"]["text"].rpartition("\n\0")
        cwd = where or cwd
        sys.stdout.write(out)
        sys.stderr.write(result["stderr"]["text"])
        if result["exit_code"] != 0:
            print(f"[exit {result['exit_code']}]", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
