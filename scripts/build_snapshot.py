"""Rebuild the bundled price snapshot from SkyPilot catalog extracts.

    python scripts/build_snapshot.py [SOURCE_DIR]

SOURCE_DIR (default: tests/catalog/fixtures/skypilot-extract, the recorded extract) holds one
SkyPilot ``vms.csv`` per cloud named ``<cloud>.csv`` or ``<cloud>.csv.gz`` plus ``SOURCE.md``. Writes ``src/gpuwise/catalog/data/offers.csv.gz`` (gzip with
a fixed mtime, so the same input gives the same bytes), ``manifest.json`` and a copy of
``SOURCE.md``. ``tests/catalog/test_sources.py`` checks the shipped files match a rebuild.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from gpuwise.catalog.offer import offers_to_csv  # noqa: E402
from gpuwise.catalog.skypilot import read_vms_csv  # noqa: E402

AS_OF = "2026-11"
SCHEMA = {"azure": "v6"}  # every other cloud comes from schema v8 (see SOURCE.md)
# The date the prices were read upstream, per cloud. Azure comes from the older v6 file whose
# date is not known (SOURCE.md): it is "unknown", which every price-age check treats as stale,
# instead of the month the extract was taken.
AS_OF_BY_CLOUD = {"azure": "unknown"}


def build(source_dir: Path) -> tuple[bytes, dict[str, object]]:
    offers = []
    clouds = {}
    for path in sorted([*source_dir.glob("*.csv"), *source_dir.glob("*.csv.gz")]):
        cloud = path.name.removesuffix(".gz").removesuffix(".csv")
        version = SCHEMA.get(cloud, "v8")
        raw = path.read_bytes()
        raw = gzip.decompress(raw) if path.suffix == ".gz" else raw  # the hash is of the CSV
        rows = read_vms_csv(
            raw.decode("utf-8"),
            cloud,
            f"{version}/{cloud}/vms.csv",
            as_of=AS_OF_BY_CLOUD.get(cloud, AS_OF),
            source=f"bundled:skypilot-{version}/{cloud}",
        )
        rows.sort(key=lambda o: (o.gpu, o.gpu_count, o.instance_type, o.region, o.zone or ""))
        offers += rows
        clouds[cloud] = {
            "schema": version,
            "offers": len(rows),
            "source_sha256": hashlib.sha256(raw).hexdigest(),
        }
    data = gzip.compress(offers_to_csv(offers).encode("utf-8"), mtime=0)
    manifest = {
        "as_of": AS_OF,
        "source": "skypilot-org/skypilot-catalog (Apache-2.0), rows extracted as described in SOURCE.md",
        "clouds": clouds,
        "offers": len(offers),
    }
    return data, manifest


def main() -> None:
    source_dir = (
        Path(sys.argv[1])
        if len(sys.argv) > 1
        else ROOT / "tests" / "catalog" / "fixtures" / "skypilot-extract"
    )
    out = ROOT / "src" / "gpuwise" / "catalog" / "data"
    data, manifest = build(source_dir)
    (out / "offers.csv.gz").write_bytes(data)
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    shutil.copyfile(source_dir / "SOURCE.md", out / "SOURCE.md")
    print(f"wrote {manifest['offers']} offers from {len(manifest['clouds'])} clouds to {out}")  # type: ignore[arg-type]


if __name__ == "__main__":
    main()
