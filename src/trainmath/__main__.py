"""``python -m trainmath``: the same as the ``trainmath`` command."""

import sys

from .cli import main

sys.exit(main())
