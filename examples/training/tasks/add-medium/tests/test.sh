#!/bin/bash
# Reward 1 when /workspace/answer.txt holds 927.
if [ "$(tr -d '[:space:]' < /workspace/answer.txt 2>/dev/null)" = "927" ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
