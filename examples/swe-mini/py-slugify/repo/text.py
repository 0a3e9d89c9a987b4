"""Text helpers for URLs."""


def slugify(title):
    """`Hello, World!` -> `hello-world`."""
    return title.lower().replace(" ", "-")


def shout(text):
    return text.upper() + "!"
