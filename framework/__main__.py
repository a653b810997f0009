"""``python -m framework`` runs the ``framework`` command."""

import sys

from framework.cli.main import main

sys.exit(main())
