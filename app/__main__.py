"""`python -m app` runs the prism command line."""

import sys

from app.cli import main

sys.exit(main())
