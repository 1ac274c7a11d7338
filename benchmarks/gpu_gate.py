"""The gate's second pass on a GPU host: stage -> verify -> publish with signed pass records, as three machines
(three cache folders; the registry is the only hand-off), plus a pass record minted with push rights alone (the
leaf's key tag moved to another image, a record beside it signed by a key of its own), which publish refuses.

    PYTHONPATH=$PWD:$PYTHONPATH python3 benchmarks/gpu_gate.py --out DIR [--name gpu_gate_1gpu]
(on the GPU host, with the engine and registry of ../shared/gpu-host/start-engine.sh running; the gpu-task layer's
usr/ holding the host's headers: benchmarks/gpu_host_gate.sh prepares it). Writes DIR/<name>.json."""

from __future__ import annotations

import argparse
import dataclasses
import io
import json
import os
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
MATRIX = "tests/gpu/matrix_gate.yaml"


def imagebuilder(*args: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "imagebuilder", "--offline", *args], cwd=ROOT, capture_output=True,
                          text=True, env={**os.environ, "COLUMNS": "160", **(env or {})})
    return {"command": "imagebuilder --offline " + " ".join(args), "exit": proc.returncode,
            "seconds": round(time.monotonic() - t0, 1), "out_tail": proc.stdout[-1500:], "err_tail": proc.stderr[-800:]}


def nodes(folder: Path) -> dict[str, dict[str, Any]]:
    return {n["layer"]: n for n in json.loads((folder / "report.json").read_text())["nodes"]}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--name", default="gpu_gate_1gpu")
    args = parser.parse_args()
    out: Path = args.out
    work = Path("/tmp/ib-gate")
    work.mkdir(parents=True, exist_ok=True)
    doc: dict[str, Any] = {"benchmark": "gpu_gate", "matrix": MATRIX,
                           "command": f"python3 benchmarks/gpu_gate.py --out DIR --name {args.name}"}
    save = lambda: (out / f"{args.name}.json").write_text(json.dumps(doc, indent=1) + "\n")  # noqa: E731

    keys = work / "keys"
    doc["keys"] = imagebuilder("keys", "new", str(keys))
    trust = ["--trust-key", str(keys / "signing.pub")]
    verifier = {"IMAGEBUILDER_SIGNING_KEY": str(keys / "signing.pem")}

    # 1. The CPU runner: stage (key tags only).
    doc["stage"] = imagebuilder("--cache-dir", str(work / "m1"), "stage", "--matrix", MATRIX, "--report",
                                str(work / "stage"))
    save()
    staged = nodes(work / "stage")
    # 2. The GPU runner: verify, signing with the verifier's key.
    doc["verify"] = imagebuilder("--cache-dir", str(work / "m2"), *trust, "verify", "--matrix", MATRIX, "--report",
                                 str(work / "verify"), env=verifier)
    verified = nodes(work / "verify")
    leaf = verified["gpu-task"]
    report = leaf.get("smoke_report") or {}
    doc["verify"].update(smoke=leaf["smoke"], gpu_verified=leaf["gpu_verified"], pass_record=leaf["pass_record"],
                         host_verdict=report.get("host_verdict"), gpu_mode=report.get("gpu_mode"),
                         gpus=report.get("gpus"),
                         devices=sorted({c.get("device") for c in report.get("checks") or [] if c.get("device")}),
                         driver=next((c.get("value") for c in report.get("checks") or []
                                      if c.get("name") == "versions.driver"), None),
                         checks={c["name"]: c["status"] for c in report.get("checks") or []})
    save()
    if doc["verify"]["exit"] != 0 or not leaf.get("pass_record"):
        doc["ok"] = False
        save()
        sys.exit(f"verify failed: {leaf.get('error')}")

    # 3. Push rights, no key: the leaf's key tag moved to another image, a record beside it signed by an intruder.
    from imagebuilder.evidence.passes import RegistryPasses
    from imagebuilder.evidence.signing import Keys, Signer, Trust
    from imagebuilder.ports.engine import DockerEngine
    from imagebuilder.ports.registry import Registry

    engine = DockerEngine.connect()
    registry = Registry.for_host("127.0.0.1:5000")
    repo, host = "gpu/pytorch-gate", "127.0.0.1:5000"
    key_tag = f"{host}/{repo}:cache-{staged['gpu-task']['key'][:12]}"
    store = RegistryPasses(registry, Keys.load(work / "m2" / "keys", {}, [keys / "signing.pub"]).trust)
    tag = leaf["pass_record"].split(" ")[1].rsplit(":", 1)[1]
    legit = store.read(repo, tag).record
    assert legit is not None
    dockerfile = f"FROM {staged['gpu-task']['image']}\nLABEL io.imagebuilder.key={staged['gpu-task']['key']}\n"
    context = io.BytesIO()
    with tarfile.open(fileobj=context, mode="w") as tar:
        info = tarfile.TarInfo("Dockerfile")
        info.size = len(dockerfile)
        tar.addfile(info, io.BytesIO(dockerfile.encode()))
    other = engine.build(context.getvalue(), network="host", sink=lambda line: None)
    engine.tag(other, key_tag)
    forged_digest = engine.push(key_tag)
    intruder = Signer.generate("an intruder with push rights")
    RegistryPasses(registry, Trust((intruder.public,)), intruder).put(
        repo, dataclasses.replace(legit, config=other).at(forged_digest, f"{host}/{repo}"))
    doc["forged"] = imagebuilder("--cache-dir", str(work / "m3"), *trust, "publish", "--matrix", MATRIX, "--report",
                                 str(work / "forged"))
    doc["forged"]["leaf_error"] = nodes(work / "forged")["gpu-task"]["error"]
    doc["forged"]["public_tags_after"] = [t for t in registry.tags(repo) if not t.startswith(("cache-", "sha256-"))]
    registry.copy(repo, staged["gpu-task"]["digest"], repo, key_tag.rsplit(":", 1)[1])  # undone
    save()

    # 4. The publish job: only what the verifier signed moves.
    doc["publish"] = imagebuilder("--cache-dir", str(work / "m4"), *trust, "publish", "--matrix", MATRIX, "--report",
                                  str(work / "publish"))
    published = nodes(work / "publish")["gpu-task"]
    found = store.lookup(repo, published["digest"], legit.spec)
    doc["publish"].update(digest=published["digest"], staged_digest=staged["gpu-task"]["digest"],
                          tags=published["tags"], record_signed_by=found.found.keyid if found.found else None,
                          verifier_key=Signer.load(keys / "signing.pem").public.keyid)
    doc["ok"] = (doc["stage"]["exit"] == 0 and doc["verify"]["exit"] == 0 and doc["verify"]["gpu_verified"] is True
                 and doc["forged"]["exit"] == 1 and "signed by an untrusted key" in str(doc["forged"]["leaf_error"])
                 and doc["publish"]["exit"] == 0 and published["digest"] == staged["gpu-task"]["digest"]
                 and doc["publish"]["record_signed_by"] == doc["publish"]["verifier_key"])
    save()
    print(json.dumps({k: (v if not isinstance(v, dict) else {x: v.get(x) for x in ("exit", "seconds")})
                      for k, v in doc.items()}, indent=1))


if __name__ == "__main__":
    main()
