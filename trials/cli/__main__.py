"""``python -m trials.cli`` runs the CLI, as ``python -m trials`` does."""

import sys

from trials.cli import main

sys.exit(main())
