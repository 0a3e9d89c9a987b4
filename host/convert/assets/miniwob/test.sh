#!/bin/sh
# The page's first reward (MiniWoB++'s core.endEpisode), as the shared server kept it: 1 when it
# is positive, else 0 (no episode ended: 0).
python3 - "__ENV__" <<'PY'
import json, os, sys, urllib.request
env = sys.argv[1]
got = json.load(urllib.request.urlopen("http://127.0.0.1:8080/__orchard/reward?env=" + env, timeout=10))
raw = got.get("raw")
print(f"miniwob {env}: raw reward {raw} ({got.get('reason')})")
os.makedirs("/logs/verifier", exist_ok=True)
with open("/logs/verifier/reward.txt", "w") as f:
    f.write("1" if raw is not None and raw > 0 else "0")
PY
