"""``--shard I/N``: one of N jobs, each reconciling the namespaces that hash to it; pure.

When one job cannot keep a pass short enough for the fleet, the fleet is split,
not the code: shard I of N takes the namespaces whose stable hash, modulo N, is
I. A namespace is never split (its services, runtimes and objects move
together), the assignment needs no coordination and no state, and the same
namespace always lands in the same shard for a given N, on every machine and
in every Python (a SHA-256 of the name, not ``hash()``, which is salted per
process). Each shard holds a Lease of its own (``omegitops-shard-I``), so
shards run in parallel and two runs of one shard never do.
"""

from __future__ import annotations

import functools
import hashlib
import re
from dataclasses import dataclass

from omegitops.util.errors import UsageError

# The RBAC of pipelines/ names each shard's Lease; it lists this many.
MAX_SHARDS = 16
_SPEC = re.compile(r"^(\d+)/(\d+)$")


# Asked for every object a shard's lists hold (80,000 pods at 10,000 services) about a
# few dozen namespaces: each name is hashed once.
@functools.lru_cache(maxsize=4096)
def bucket(namespace: str) -> int:
    """A stable number for a namespace: the first 8 bytes of its name's SHA-256."""
    return int.from_bytes(hashlib.sha256(namespace.encode()).digest()[:8], "big")


@dataclass(frozen=True)
class Shard:
    """Shard ``index`` (from 0) of ``count``."""

    index: int
    count: int

    @staticmethod
    def parse(text: str) -> Shard:
        """``I/N`` with 0 <= I < N <= MAX_SHARDS; UsageError otherwise."""
        match = _SPEC.match(text.strip())
        if match is None:
            raise UsageError(f"--shard {text!r}: expected I/N, e.g. 0/4")
        index, count = int(match[1]), int(match[2])
        if not 1 <= count <= MAX_SHARDS or not 0 <= index < count:
            raise UsageError(f"--shard {text!r}: I must be 0 to N-1, and N 1 to "
                             f"{MAX_SHARDS}")
        return Shard(index, count)

    def owns(self, namespace: str) -> bool:
        return bucket(namespace) % self.count == self.index

    @property
    def lease_name(self) -> str:
        return f"omegitops-shard-{self.index}"

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"
