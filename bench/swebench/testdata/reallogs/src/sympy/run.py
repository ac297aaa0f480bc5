# What sympy's bin/test -C --verbose does for one file: SymPyTests with a
# verbose PyTestReporter, the cache off (-C), files and tests in order
# (sympy.test's default sort=True). bin/test finds files under the
# sympy tree; this suite lives outside it, so the file is given directly.
import os
import sys

os.environ["SYMPY_USE_CACHE"] = "no"
from sympy.testing.runtests import PyTestReporter, SymPyTests

reporter = PyTestReporter(verbose=True, colors=False)
tests = SymPyTests(reporter)
tests._testfiles.append(os.path.abspath(sys.argv[1]))
sys.exit(0 if tests.test(sort=True) else 1)
