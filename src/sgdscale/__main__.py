"""`python -m sgdscale ...`: the same command line, and the same exit status, as the `sgdscale` script."""

import sys

from sgdscale.cli import main

sys.exit(main())
