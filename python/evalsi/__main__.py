"""python -m evalsi: the same as the evalsi console script."""

import sys

from evalsi.cli import main

if __name__ == "__main__":
    sys.exit(main())
