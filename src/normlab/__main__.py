"""``python -m normlab``: the ``normlab`` command."""

import sys

from normlab.cli import main

sys.exit(main())
