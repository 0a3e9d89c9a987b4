#!/bin/bash
# Runs the agent's script on inputs it has never seen.
ok=0
printf 'one two  three\nfour\n' > /tmp/a.txt
printf '' > /tmp/b.txt
printf '  lots   of\tspace \n\n here ' > /tmp/c.txt
[ -x /workspace/wc.sh ] && \
  [ "$(/workspace/wc.sh /tmp/a.txt)" = "4" ] && \
  [ "$(/workspace/wc.sh /tmp/b.txt)" = "0" ] && \
  [ "$(/workspace/wc.sh /tmp/c.txt)" = "4" ] && ok=1
echo $ok > /logs/verifier/reward.txt
