# Django's test runner at --verbosity 2, as SWE-bench runs django
# (./tests/runtests.py --verbosity 2 --settings=test_sqlite --parallel 1).
import unittest

from django.test import SimpleTestCase


class CalcTests(SimpleTestCase):
    def test_adds(self):  # passes
        self.assertEqual(2 + 2, 4)

    def test_subtracts_wrongly(self):  # fails
        self.assertEqual(3 - 1, 1)

    def test_raises(self):  # errors
        raise ValueError("boom")

    @unittest.skip("not here")
    def test_skipped(self):  # skipped
        pass

    @unittest.expectedFailure
    def test_expected_failure(self):  # xfail
        self.assertEqual(1, 2)

    def test_documented(self):  # passes
        """Adds numbers, with a docstring."""
        self.assertEqual(1 + 1, 2)
