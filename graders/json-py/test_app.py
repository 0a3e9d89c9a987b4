"""Unit tests of the comparison, run natively: python3 -m unittest graders/json-py/test_app.py"""

import sys
import types
import unittest

# The component's imports exist only inside the component; the comparison needs none of them.
for name in ["componentize_py_types", "wit_world", "wit_world.exports", "wit_world.exports.grading", "wit_world.imports"]:
    sys.modules.setdefault(name, types.ModuleType(name))
sys.modules["componentize_py_types"].Err = Exception
sys.modules["wit_world"].exports = sys.modules["wit_world.exports"]
sys.modules["wit_world.exports"].Grading = object
for attr in ["Score", "SubScore", "Verdict_Graded", "Verdict_Unknown"]:
    setattr(sys.modules["wit_world.exports.grading"], attr, object)
sys.modules["wit_world.imports"].sandbox = None
sys.modules["wit_world.imports"].types = None

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from app import compare  # noqa: E402


class CompareTests(unittest.TestCase):
    def test_leaves_match_with_tolerance_and_loose_strings(self):
        want = {"total": 10.0, "items": [{"name": "Tea", "qty": 2}], "ok": True}
        got = {"total": 10.0000001, "items": [{"name": " tea ", "qty": 2}], "ok": True, "extra": 1}
        self.assertEqual(compare(want, got, 1e-3, True)[:2], (4, 4))
        matched, total, bad = compare(want, got, 1e-9, False)
        self.assertEqual((matched, total), (2, 4))
        self.assertIn('$.items[0].name: want "Tea", got " tea "', bad)

    def test_missing_and_strict(self):
        self.assertEqual(compare({"a": 1, "b": 2}, {"a": 1})[:2], (1, 2))
        self.assertEqual(compare({"a": 1}, {"a": 1, "b": 2}, strict=True)[:2], (1, 2))
        self.assertEqual(compare({"a": True}, {"a": 1})[:2], (0, 1))


if __name__ == "__main__":
    unittest.main()
