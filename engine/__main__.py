"""`python -m trdb`: the trdb command."""
import sys

from trdb.api.shell import main

sys.exit(main())
