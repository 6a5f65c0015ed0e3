"""Built-in plugins, one module per plugin (``basic`` holds the standard filters and the
BestFit / Random scorers, ``baselines`` the FGD paper's other baselines); importing this
package registers them in ``framework.REGISTRY``. Each plugin declares its arguments as a
frozen ``Args`` dataclass (``processors/args.py``)."""
from . import (anti_affinity, balanced, baselines, basic, batch, carbon, cost, cpu_mem_fit, fgd,  # noqa: F401
               first_fit, latency, model_locality, pue, strand, topology, worst_fit, zone_spread)
from . import federated  # noqa: F401  (issue 22: DataSite, AggregatorTraffic)
