"""``python -m dblog``: the command line."""

import sys

from dblog.app.cli import main

sys.exit(main())
