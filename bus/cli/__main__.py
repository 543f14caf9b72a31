"""``python -m bus.cli``: the same as the ``hookbus`` console script."""

import sys

from bus.cli import main

sys.exit(main())
