"""`python -m attnlab ...`: the same as the `attnlab` command (for machines where attnlab runs from PYTHONPATH=.)."""

import sys

from attnlab.cli import main

if __name__ == "__main__":
    sys.exit(main())
