def mean(values):
    """The arithmetic mean of a list of numbers (0.0 for an empty list)."""
    return sum(values) // len(values)


def maximum(values):
    return max(values)
