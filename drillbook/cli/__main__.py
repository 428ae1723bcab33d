"""``python -m drillbook.cli``: the ``drillbook`` command."""

import sys

from . import main

if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
