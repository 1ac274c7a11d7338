"""Image size versus content size, per layer, for the images of a build report.

For each node: `layer bytes` is what the node's own layers add (image size minus its parent's);
`content bytes` is what a user can see that the node added or changed in the final file tree
(regular files new or different in size/mtime relative to the parent). A ratio near 1.0 means the
layer carries no waste: no deleted caches, wheels or package lists hiding in lower steps.

    python benchmarks/image_sizes.py reports/demo/report.json [MORE_REPORTS ...] [--name image_sizes]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import docker
from common import save

LIST = "find / -xdev -type f -printf '%s\\t%T@\\t%p\\n' 2>/dev/null"


def files(client: docker.DockerClient, image: str) -> dict[str, tuple[int, str]]:
    # as root: the images run as a non-root user, who cannot read every folder
    out = client.containers.run(image, ["sh", "-c", LIST], remove=True, network_mode="none", entrypoint=[], user="0")
    table: dict[str, tuple[int, str]] = {}
    for line in out.decode(errors="replace").splitlines():
        size, mtime, path = line.split("\t", 2)
        table[path] = (int(size), mtime)
    return table


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("reports", type=Path, nargs="+")
    parser.add_argument("--name", default="image_sizes")
    args = parser.parse_args()
    nodes = [n for path in args.reports for n in json.loads(path.read_text())["nodes"]]
    client = docker.from_env(timeout=600)
    cache: dict[str, dict[str, tuple[int, str]]] = {}
    rows = []
    for node in nodes:
        if not node.get("image"):
            continue
        image = client.images.get(node["image"])
        parent_id = image.labels.get("org.opencontainers.image.base.digest")
        parent = client.images.get(parent_id) if parent_id else None
        layer_bytes = image.attrs["Size"] - (parent.attrs["Size"] if parent else 0)
        mine = cache.setdefault(image.id, files(client, image.id))
        theirs = cache.setdefault(parent.id, files(client, parent.id)) if parent else {}
        content = sum(size for path, (size, mtime) in mine.items() if theirs.get(path) != (size, mtime))
        rows.append({"node": node["node"], "image_bytes": image.attrs["Size"], "layer_bytes": layer_bytes,
                     "content_bytes": content, "ratio": round(layer_bytes / content, 4) if content else None})
    width = max(len(r["node"]) for r in rows)
    print(f"{'node':{width}}  {'image MB':>9} {'layer MB':>9} {'content MB':>10} {'ratio':>6}")
    for r in rows:
        print(f"{r['node']:{width}}  {r['image_bytes'] / 1e6:9.1f} {r['layer_bytes'] / 1e6:9.1f} "
              f"{r['content_bytes'] / 1e6:10.1f} {r['ratio'] if r['ratio'] is not None else '-':>6}")
    reports = " ".join(str(p) for p in args.reports)
    out = save(args.name, {"reports": reports, "nodes": rows},
               f"python benchmarks/image_sizes.py {reports} --name {args.name}")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
