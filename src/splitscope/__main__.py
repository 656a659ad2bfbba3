"""``python -m splitscope``: the command line (:func:`splitscope.cli.main`)."""

import sys

from splitscope.cli import main

sys.exit(main())
