"""What the ecosystem's copies of the evidence cost per record, on a real registry: the seconds one pass record
takes to write (its native artifact, the fallback referrers index and, by layout, the Sigstore bundles of the
record and its test-result statement and the two `.att` layers), for each `attestations:` layout.

    python benchmarks/attestation_cost.py [--registry 127.0.0.1:5000] [--records 7]

Each record is about an image of its own (a config and a manifest pushed into a fresh repository
`itest/attestation-cost-<random>`), signed by a new key. The median of `--records` writes per layout is reported,
with the machine's load: on a shared machine the seconds are the registry round trips and the machine's queue.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import machine, median, save
from imagebuilder.evidence import passes, sigstore
from imagebuilder.evidence.ecosystem import Ecosystem
from imagebuilder.evidence.passes import PassRecord, RegistryPasses
from imagebuilder.evidence.signing import Signer, Trust
from imagebuilder.ports.registry import Registry

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--registry", default="127.0.0.1:5000")
    parser.add_argument("--records", type=int, default=7)
    args = parser.parse_args()
    reg = Registry.for_host(args.registry)
    repo = f"itest/attestation-cost-{uuid.uuid4().hex[:8]}"
    signer = Signer.generate()
    out: dict[str, dict[str, float]] = {}
    for kinds in ("off", "att", "bundle", "both"):
        seconds = []
        for i in range(args.records):
            config = reg.put_blob(repo, json.dumps({"config": {"Labels": {"n": f"{kinds}{i}"}},
                                                    "rootfs": {"type": "layers", "diff_ids": []}}).encode())
            body = json.dumps({"schemaVersion": 2, "mediaType": OCI_MANIFEST, "layers": [], "config": {
                "mediaType": "application/vnd.oci.image.config.v1+json", "digest": config, "size": 1}}).encode()
            digest = reg.put_manifest(repo, f"image-{kinds}-{i}", body, OCI_MANIFEST)
            record = PassRecord(passes.PASSED, config=config, spec="5" * 64, node="n", entry="e",
                                date="2026-11-27").at(digest, f"{args.registry}/{repo}")
            store = RegistryPasses(reg, Trust((signer.public,)), signer, Ecosystem(sigstore.Layouts(kinds), signer))
            start = time.perf_counter()
            store.put(repo, record)
            seconds.append(time.perf_counter() - start)
        out[kinds] = {"median_s": round(median(seconds), 3), "max_s": round(max(seconds), 3)}
        print(f"{kinds}: median {out[kinds]['median_s']} s per record", flush=True)
    save("attestation_cost", {"machine": machine(), "load_average": os.getloadavg(), "repository": repo,
                              "records_per_layout": args.records, "per_record": out},
         "python benchmarks/attestation_cost.py " + " ".join(sys.argv[1:]))


if __name__ == "__main__":
    main()
