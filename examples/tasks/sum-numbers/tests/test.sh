#!/bin/bash
# The expected sum is fixed by numbers.txt.
if [ "$(tr -d '[:space:]' < /workspace/answer.txt 2>/dev/null)" = "407269" ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
