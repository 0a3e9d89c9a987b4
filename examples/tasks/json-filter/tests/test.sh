#!/bin/bash
expected=$'Bao\nChen\nJonas\nMira'
if [ "$(cat /workspace/older.txt 2>/dev/null)" = "$expected" ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
