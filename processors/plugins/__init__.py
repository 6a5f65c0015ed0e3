"""Built-in plugins; importing this package registers them in ``framework.REGISTRY``."""
from . import baselines, basic, fgd  # noqa: F401
