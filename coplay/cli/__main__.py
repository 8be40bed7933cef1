"""``python -m coplay.cli``: the ``coplay`` command."""

import sys

from coplay.cli import main

sys.exit(main())
