#!/bin/bash
cat > /workspace/stats.py <<'PY'
def mean(values):
    """The arithmetic mean of a list of numbers (0.0 for an empty list)."""
    if not values:
        return 0.0
    return sum(values) / len(values)


def maximum(values):
    return max(values)
PY
