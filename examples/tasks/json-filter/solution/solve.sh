#!/bin/bash
python3 -c '
import json
people = json.load(open("/workspace/people.json"))
print("\n".join(sorted(p["name"] for p in people if p["age"] > 30)))
' > /workspace/older.txt
