"""A machine of a pod that holds the token but lies about lengths: `xlasim run ARGS...` whose
every message to another machine declares `DECLARED` bytes, whatever it holds (docs/pods.md,
"Threat model": lengths are checked before anything is allocated).

    DECLARED=-5 python rogue_member.py run --machines 2 --machine-rank 1 ... script.py
"""

import os
import sys

from xlasim.cli import main
from xlasim.pods import link

if __name__ == "__main__":
    declared = int(os.environ["DECLARED"])
    honest = link.header
    link.header = lambda check, length: honest(check, declared)
    sys.exit(main())
