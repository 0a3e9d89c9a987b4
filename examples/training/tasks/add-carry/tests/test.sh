#!/bin/bash
# Reward 1 when /workspace/answer.txt holds 100000.
if [ "$(tr -d '[:space:]' < /workspace/answer.txt 2>/dev/null)" = "100000" ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
