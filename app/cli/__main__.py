"""`python -m app.cli`: the `specdec` command."""

import sys

from app.cli import main

sys.exit(main())
