from text import shout, slugify


def test_lowercase():
    assert slugify("Hello") == "hello"


def test_spaces():
    assert slugify("a b") == "a-b"


def test_shout():
    assert shout("hi") == "HI!"
