# sympy's own test runner (sympy.testing.runtests), as SWE-bench runs sympy
# with `bin/test -C --verbose <file>`.
from sympy.testing.pytest import raises, skip, XFAIL


def test_adds():  # passes
    assert 2 + 2 == 4


def test_subtracts_wrongly():  # fails
    assert 3 - 1 == 1


def test_raises():  # errors
    raise ValueError("boom")


def test_skipped():  # skipped
    skip("not here")


@XFAIL
def test_expected_failure():  # xfail
    assert False


def test_checks_raises():  # passes
    raises(ZeroDivisionError, lambda: 1 / 0)
