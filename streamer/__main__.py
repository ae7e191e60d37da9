"""`python -m streamer` is the `streamer` command."""

import sys

from streamer.cli import main

sys.exit(main())
