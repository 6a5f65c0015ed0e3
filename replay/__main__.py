"""``python -m suanli.replay`` runs the FGD protocol (see ``fgd_protocol.py``)."""
from .fgd_protocol import main

raise SystemExit(main())
