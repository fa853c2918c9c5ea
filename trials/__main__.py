"""``python -m trials`` runs the CLI."""

import sys

from trials.cli import main

sys.exit(main())
