# pytest, run as SWE-bench runs its pytest repos
# (pytest --no-header -rA --tb=no -p no:cacheprovider; astropy's -vv variant).
import pytest


def test_adds():  # passes
    assert 2 + 2 == 4


def test_subtracts_wrongly():  # fails
    assert 3 - 1 == 1


@pytest.fixture
def broken():
    raise RuntimeError("fixture boom")


def test_fixture_errors(broken):  # errors (in setup)
    pass


@pytest.mark.skip(reason="not here")
def test_skipped():  # skipped
    pass


@pytest.mark.xfail(reason="known")
def test_expected_failure():  # xfail
    assert False


@pytest.mark.parametrize("v", ["a b", "/tmp/x/y.txt"])
def test_param(v):  # passes twice
    assert v
