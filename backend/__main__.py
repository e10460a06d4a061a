"""``python -m backend`` is the ``pair`` command."""

import sys

from backend.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
