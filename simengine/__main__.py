"""``python -m simengine`` (see :mod:`simengine.cli`)."""

import sys

from simengine.cli import main

sys.exit(main())
