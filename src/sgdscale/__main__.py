"""`python -m sgdscale ...`: the same command line as the `sgdscale` script."""

from sgdscale.cli import main

main()
