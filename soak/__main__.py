"""``python -m soak`` is ``soaktop``."""

import sys

from soak.cli.main import main

sys.exit(main())
