"""``python -m suanli.connectors sim|local ...``: see :mod:`suanli.connectors.launch`."""
import sys

from suanli.connectors.launch import main

sys.exit(main())
