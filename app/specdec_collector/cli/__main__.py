"""`python -m specdec_collector.cli`: the `specdec` command."""

import sys

from specdec_collector.cli import main

sys.exit(main())
