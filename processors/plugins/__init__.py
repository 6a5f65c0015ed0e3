"""Built-in plugins; importing this package registers them in ``framework.REGISTRY``."""
from . import baselines, basic, batch, fgd, placement  # noqa: F401
