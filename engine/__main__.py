"""`python -m trdb`: the trdb command."""
import sys

from trdb.api.shell.main import main

sys.exit(main())
