"""`python -m skillevo` is the `skillevo` command."""

import sys

from skillevo.commands import main

sys.exit(main())
