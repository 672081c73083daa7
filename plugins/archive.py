"""Build krew's archive of ``kubectl ome`` (``plugins/ome.yaml`` names it): a zip of
the launcher ``plugins/kubectl-ome``, stored uncompressed with fixed dates and modes,
so that the same launcher gives the same bytes on any machine and the manifest's
sha256 can be checked in the tests (tests/project/test_krew_manifest.py) and at a
release (.github/workflows/release.yml), which uploads it.

    python3 plugins/archive.py krew/kubectl-ome.zip   # prints the sha256
"""

from __future__ import annotations

import hashlib
import io
import sys
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
LAUNCHER = HERE / "kubectl-ome"
# The earliest date a zip holds: no build time in the bytes.
EPOCH = (1980, 1, 1, 0, 0, 0)


def archive_bytes() -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_STORED) as archive:
        entry = zipfile.ZipInfo("kubectl-ome", date_time=EPOCH)
        entry.create_system = 3  # Unix, so that the mode below is read
        entry.external_attr = (0o100755 << 16)
        archive.writestr(entry, LAUNCHER.read_bytes())
    return buffer.getvalue()


def sha256() -> str:
    return hashlib.sha256(archive_bytes()).hexdigest()


if __name__ == "__main__":
    target = Path(sys.argv[1] if len(sys.argv) > 1 else "dist/kubectl-ome.zip")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(archive_bytes())
    print(sha256())
