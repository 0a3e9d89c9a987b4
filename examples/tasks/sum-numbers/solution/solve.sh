#!/bin/bash
awk '{ s += $1 } END { print s }' /workspace/numbers.txt > /workspace/answer.txt
