"""``python -m bus._cli``: the same as the ``hookbus`` console script."""

import sys

from bus._cli import main

sys.exit(main())
