"""How long model weights take to load onto a node: the load-time model (pure, no Kafka).

A task that carries a model (``DispatchCommand.model``) starts once its weights are on the
node. They come from the nearest of three places:

=========  ====================================================  ============  ==========
source     what it is                                            bandwidth     latency
=========  ====================================================  ============  ==========
local      the node's own model cache (NVMe disk -> host RAM)    2,000 MiB/s   10 ms
peer       another node of the same site (LAN, 10 GbE)             1,100 MiB/s   50 ms
origin     the model registry / object store over the site's     110 MiB/s     800 ms
           uplink (WAN, ~1 Gbit/s effective per transfer)
=========  ====================================================  ============  ==========

``load_ms(size_mib, source) = latency + size_mib / bandwidth x 1000``, rounded to the ms.

Where the constants come from (assumptions, stated so they can be argued with):

* **local**: a PCIe 4.0 NVMe drive reads 3-7 GB/s sequentially; safetensors loading is
  mmap plus a copy, so ~2 GiB/s end to end is a conservative figure; 10 ms to open the
  files and read their headers.
* **peer**: 10 GbE is 1,192 MiB/s on the wire; ~92 % of it after TCP and HTTP framing,
  1,100 MiB/s; 50 ms for the request and the first bytes on a site LAN.
* **origin**: an edge site's uplink of 1 Gbit/s (119 MiB/s) shared with little else, ~92 %
  usable, 110 MiB/s; 800 ms for DNS, TLS, the registry's manifest round trips over WAN.

So a 7 GiB model loads in ~4 s locally, ~7 s from a peer and ~66 s from the origin; a
70 GiB one in ~36 s, ~65 s and ~652 s. The scheduler's model-locality score and the prewarm
planner (``processors/``) use the same figures through :func:`load_ms`; the simulated
connector waits them out (scaled by its time scale); the cold-start what-if
(``replay/prewarm_whatif.py``) counts them. Every function here is pure and deterministic.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Literal, Mapping

Source = Literal["local", "peer", "origin"]
SOURCES: tuple[Source, ...] = ("local", "peer", "origin")


@dataclass(frozen=True, slots=True)
class Link:
    """One source's bandwidth (MiB/s) and fixed latency (ms)."""
    mib_per_s: float
    latency_ms: float


LINKS: Mapping[str, Link] = {
    "local": Link(2000.0, 10.0),     # NVMe cache -> host memory
    "peer": Link(1100.0, 50.0),      # another node at the site, 10 GbE LAN
    "origin": Link(110.0, 800.0),    # object store over a ~1 Gbit/s site uplink
}


def load_ms(size_mib: int | float, source: str) -> int:
    """Milliseconds to load ``size_mib`` MiB of weights from ``source`` (see the table).
    A size of 0 or less costs only the latency. Unknown sources raise ``KeyError``."""
    link = LINKS[source]
    return int(round(link.latency_ms + max(0.0, float(size_mib)) / link.mib_per_s * 1000.0))


def saved_ms(size_mib: int | float, source: str) -> int:
    """What loading from ``source`` saves against the origin (0 for the origin)."""
    return load_ms(size_mib, "origin") - load_ms(size_mib, source)


def source_for(holds_locally: bool, site_peers_holding: Iterable[str] = ()) -> Source:
    """Where a node gets weights from: its own cache, else a peer of its site that holds
    them (any of ``site_peers_holding``), else the origin."""
    if holds_locally:
        return "local"
    for _ in site_peers_holding:
        return "peer"
    return "origin"
