"""`python -m a800lab <command> ...` (also installed as `a800lab`); the usage is `--help`."""

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
