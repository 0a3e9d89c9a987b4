from stats import maximum, total


def test_total():
    assert total([1, 2, 3]) == 6


def test_maximum():
    assert maximum([3, 9, 2]) == 9
