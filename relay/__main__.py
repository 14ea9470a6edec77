"""``python -m relay``: the same entry point as ``relay.pyz``."""

import sys

from relay.entry import main

sys.exit(main())
