"""`python -m service …`: the operator CLI (service/cli.py)."""

import sys

from .cli import main

sys.exit(main())
