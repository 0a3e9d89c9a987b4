#!/bin/bash
cd /workspace
python3 - <<'PY'
import json, sys
sys.path.insert(0, "/workspace")
checks = {}
try:
    from stats import mean, maximum
    checks["halves"] = mean([1, 2]) == 1.5
    checks["empty"] = mean([]) == 0.0
    checks["ints"] = mean([2, 4, 6]) == 4
    checks["max_untouched"] = maximum([3, 9, 1]) == 9
except Exception as e:
    print("error:", e)
score = sum(checks.values()) / 4
json.dump({"reward": 1.0 if score == 1 else 0.0, "checks_passed": score}, open("/logs/verifier/reward.json", "w"))
print(checks)
PY
