"""`python -m app` runs the prism command line (app/cli.py), on the main thread."""

import sys

from app.cli import main

sys.exit(main())
