#!/bin/bash
# Reward 1 when /workspace/hello.txt holds exactly "Hello, Orchard!".
if [ "$(cat /workspace/hello.txt 2>/dev/null)" = "Hello, Orchard!" ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
