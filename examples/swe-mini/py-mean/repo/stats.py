"""Small statistics helpers."""


def total(values):
    return sum(values)


def mean(values):
    return sum(values) // len(values)


def maximum(values):
    return max(values)
