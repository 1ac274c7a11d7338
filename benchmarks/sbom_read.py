"""What reading an image's layers for its SBOM costs, both ways the publish step reads them.

For each layer of one published image (`REGISTRY/REPO@DIGEST`, whose image is on this machine's engine):
- `folder_s`: `inventory.read_folder` over the layer's folder in the engine's own storage (overlay2, as root);
- `blob_s`: `steps.supply.read_blob` of its blob from the registry (streamed, gunzipped, the tar hashed against
  its diff_id, the blob against its digest);
and that both read the same facts (`same`). Then the whole SBOM: the inventory stacked over every layer and the
CycloneDX document made from it (`document_s`), and the document validated against the schema (`validate_s`,
which publish does not do: the tests do).

    python benchmarks/sbom_read.py REGISTRY/REPO@DIGEST

Needs the engine and the registry (`make env`) and an image pushed there by this engine (e.g. the CPU chain of
`make demo`, or an integration run's); writes benchmarks/results/sbom_read.json."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import save
from imagebuilder.ports.engine import DockerEngine
from imagebuilder.ports.reference import parse
from imagebuilder.ports.registry import Registry
from imagebuilder.steps.supply import image_layers, read_blob
from imagebuilder.supply import cyclonedx
from imagebuilder.supply.inventory import Inventory, read_folder


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("image", help="REGISTRY/REPO@DIGEST of an image this engine holds")
    args = parser.parse_args()
    ref = parse(args.image)
    registry, engine = Registry.for_host(ref.host), DockerEngine.connect()
    digest = ref.reference
    layers, diff_ids, config = image_layers(registry, ref.repository, digest)
    folders = engine.layer_folders(config)
    if folders is None or len(folders) != len(diff_ids):
        print(f"the engine does not hold {config} in overlay2 folders it can read (run as root)", file=sys.stderr)
        return 2
    rows: list[dict[str, Any]] = []
    inventory = Inventory.empty()
    for layer, diff_id, folder in zip(layers, diff_ids, folders, strict=True):
        start = time.perf_counter()
        from_folder = read_folder(folder)
        folder_s = time.perf_counter() - start
        start = time.perf_counter()
        from_blob = read_blob(registry, ref.repository, layer, diff_id)
        blob_s = time.perf_counter() - start
        inventory = inventory.apply(from_folder, "layer", diff_id)
        rows.append({"diff_id": diff_id, "compressed_mib": round(int(layer["size"]) / 2**20, 1),
                     "folder_s": round(folder_s, 3), "blob_s": round(blob_s, 3), "same": from_folder == from_blob,
                     "dists": len(from_folder.dists), "debs": len(from_folder.dpkg or ())})
    start = time.perf_counter()
    document = cyclonedx.document(inventory, image=f"{ref.host}/{ref.repository}", digest=digest, tool_version="b")
    document_s = time.perf_counter() - start
    start = time.perf_counter()
    problem = cyclonedx.validate(document)
    validate_s = time.perf_counter() - start
    summary = {"image": args.image, "layers": len(rows), "components": len(inventory.components),
               "compressed_mib": round(sum(r["compressed_mib"] for r in rows), 1),
               "folder_s": round(sum(r["folder_s"] for r in rows), 2),
               "blob_s": round(sum(r["blob_s"] for r in rows), 2),
               "all_same": all(r["same"] for r in rows), "document_s": round(document_s, 3),
               "validate_s": round(validate_s, 3), "valid": problem is None}
    out = save("sbom_read", {"summary": summary, "layers": rows}, f"python benchmarks/sbom_read.py {args.image}")
    print(json.dumps(summary, indent=1))
    print(f"wrote {out}")
    return 0 if summary["all_same"] and summary["valid"] else 1


if __name__ == "__main__":
    sys.exit(main())
