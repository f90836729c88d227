"""``python -m modelgen``: see :mod:`modelgen.cli`."""

import sys

from modelgen.cli import main

sys.exit(main())
