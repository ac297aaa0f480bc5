"""Records where this checkout is when a wheel of the evalsi package is built.

pip install ./python builds a wheel from this directory; the installed
package no longer sits in the checkout, so the launcher reads the path from
evalsi/_origin.py to build the Go CLI from it. An editable install (uv sync)
finds the checkout from its own location instead.
"""

import os

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))


class BuildPyWithOrigin(build_py):
    def run(self):
        super().run()
        root = os.path.dirname(HERE)
        checkout = root if os.path.isfile(os.path.join(root, "go.mod")) else None
        target = os.path.join(self.build_lib, "evalsi", "_origin.py")
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with open(target, "w", encoding="utf-8") as f:
            f.write('"""Written by setup.py: the checkout this wheel was built from."""\n')
            f.write("CHECKOUT = %r\n" % checkout)


setup(cmdclass={"build_py": BuildPyWithOrigin})
