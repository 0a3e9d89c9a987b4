#!/bin/sh
# OSWorld's own evaluator for this task (evaluate.py): its getters read the desktop after the
# agent, its metrics score; the score is the reward.
exec python3 /tests/evaluate.py
