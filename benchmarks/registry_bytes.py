"""What a CUDA matrix costs a registry, in today's layout and in the shared-CUDA layout, on PyPI's real wheels.

    python benchmarks/registry_bytes.py [--before REV] [--torch 2.12.0 --torch 2.12.1]
                                        [--python-prefix PREFIX | --no-second-python] [--out NAME]

Both layouts build the same entries from one local wheelhouse (downloaded first, so neither pays PyPI's speed),
all cu130: the first --torch release in runtime and devel for Python 3.11 and a second Python, and every further
release in runtime for 3.11. Debian's bookworm ships only Python 3.11 and no other interpreter can be downloaded
here, so the second Python is a CPython install already on this machine (--python-prefix; default: pyenv's
3.12 under ~/.pyenv/versions), copied into a base image as /opt/python/X.Y with a `pythonX.Y` on PATH.
`before` is the project at REV (default: the commit before the shared CUDA node, 7a7ee18) with its one-layer
`base` per entry; that layout makes its venv with the OS's `python3`, so its second-Python entries get a base
image whose `python3` is that Python (`include:`), the way its users had to. `after` is this checkout with the
project's split tree (os -> cuda -> torch -> devel), every entry on the one base image that has both Pythons.
Each layout stages its nodes (`imagebuilder stage`: build, push every node under its key tag) into a registry
of its own, started empty.

Reported per layout:
- `unique_registry_bytes`: the sum of distinct blobs the registry stores (its blob folder);
- `sum_image_bytes`: the sum, over the entries' leaf images, of their compressed layers (what a registry
  without sharing would store);
- `second_pull_bytes` and its ratio: what pulling each further entry transfers when the first entry's image is
  already on the engine (its layers not in the first's, compressed, from the manifests);
- `image_vs_content`: each leaf image's size against the bytes of its files (`du -sxb /` inside it);
- `build_wall_s`: the stage command's wall time;
- with --smoke, `smoke`: the after layout's leaves through the smoke suite (`build --no-push` finds each image by
  its key; on a host without a GPU, the CPU-side checks), per leaf its check counts and the versions it read;
- `by_layer`: the registry bytes each layer of the tree adds (blobs first seen in its images, nodes in build
  order), which shows what no layout can share: each (torch release, Python) is its own build of torch, whose
  libraries differ byte for byte between Pythons.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
import urllib.request
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from common import ROOT, save

from imagebuilder.ports.registry import Registry

BEFORE = "7a7ee18"  # main before the shared CUDA node
CA = "/etc/ssl/certs/ca-certificates.crt"
AFTER_TREE = '[os, {layer: cuda, when: {accelerator: "cu*"}}, torch, {layer: devel, when: {flavor: devel}}]'


def sh(*cmd: str, cwd: Path = ROOT, env: dict[str, str] | None = None) -> str:
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, env={**os.environ, **(env or {})})
    if proc.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return proc.stdout


def download(wheels: Path, releases: list[str], pythons: list[str], toolkit: str) -> float:
    """Every wheel of every entry (manylinux x86_64) into one wheelhouse; seconds taken."""
    start = time.monotonic()
    wheels.mkdir(parents=True, exist_ok=True)
    for torch in releases:
        for python in pythons if torch == releases[0] else pythons[:1]:
            sh(sys.executable, "-m", "pip", "download", "--isolated", "-q", "--only-binary=:all:", "--cert", CA,
               "--python-version", python, "--index-url", "https://pypi.org/simple", "--dest", str(wheels),
               f"torch=={torch}", *([toolkit] if torch == releases[0] else []))
    return time.monotonic() - start


def python_version(prefix: Path) -> str:
    exe = next((p for p in sorted((prefix / "bin").glob("python3.*")) if p.name.count(".") == 1), None)
    if exe is None:
        sys.exit(f"--python-prefix {prefix}: no bin/python3.X there")
    return sh(str(exe), "-c", "import sys; print('%d.%d' % sys.version_info[:2])").strip()


def python_bases(prefix: Path, version: str, work: Path) -> tuple[str, str]:
    """Two base images on debian:bookworm with the CPython at PREFIX as /opt/python/VERSION: one with only
    `pythonVERSION` on PATH (the after layout's one base), one where `python3` is it too (the before layout's
    base for that Python's entries). A wrapper, not a symlink, so a venv's home is the real prefix. The copy
    leaves out the test suite, the static library, site-packages and bytecode caches."""
    ctx = work / "python-base"
    shutil.rmtree(ctx, ignore_errors=True)
    ctx.mkdir(parents=True)
    shutil.copytree(prefix, ctx / "python", symlinks=True, ignore=shutil.ignore_patterns(
        "test", "__pycache__", "libpython*.a", "site-packages"))
    (ctx / "python" / "lib" / f"python{version}" / "site-packages").mkdir()
    wrapper = f"printf '#!/bin/sh\\nexec /opt/python/{version}/bin/python{version} \"$@\"\\n'"
    common = textwrap.dedent(f"""
        FROM debian:bookworm
        COPY python /opt/python/{version}
        RUN echo /opt/python/{version}/lib > /etc/ld.so.conf.d/python{version}.conf && ldconfig \\
         && {wrapper} > /usr/local/bin/python{version} && chmod 755 /usr/local/bin/python{version}
        """).lstrip()
    tags = (f"imagebuilder-bench/python:{version}", f"imagebuilder-bench/python:{version}-as-python3")
    (ctx / "Dockerfile").write_text(common)
    sh("docker", "build", "-q", "-t", tags[0], str(ctx))
    (ctx / "Dockerfile").write_text(common + f"RUN ln -s python{version} /usr/local/bin/python3\n")
    sh("docker", "build", "-q", "-t", tags[1], str(ctx))
    return tags


def registry(port: int, root: Path) -> subprocess.Popen[bytes]:
    conf = root / "config.yml"
    (root / "data").mkdir(parents=True, exist_ok=True)
    conf.write_text(textwrap.dedent(f"""
        version: 0.1
        log: {{level: warn}}
        storage: {{filesystem: {{rootdirectory: {root / 'data'}}}}}
        http: {{addr: 127.0.0.1:{port}}}
        """))
    proc = subprocess.Popen(["docker-registry", "serve", str(conf)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    for _ in range(80):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/", timeout=1)
            return proc
        except OSError:
            time.sleep(0.25)
    sys.exit(f"registry on {port} did not come up")


def layers_of(port: int, repo: str, tag: str) -> list[tuple[str, int]]:
    """The compressed layers an image's manifest names: (digest, size)."""
    body, _ = Registry.for_host(f"127.0.0.1:{port}").manifest(repo, tag)
    return [(layer["digest"], int(layer["size"])) for layer in json.loads(body)["layers"]]


def blob_bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in (root / "data").rglob("data") if p.is_file() and "/blobs/" in str(p))


def matrix(folder: Path, port: int, wheels: Path, tree: str, releases: list[str], pythons: list[str],
           base: str, per_python: dict[str, str]) -> Path:
    """The benchmark's matrix: BASE for every entry, except a Python in PER_PYTHON gets its own base image."""
    include = "".join(f'  - {{python: "{p}", base_image: "{b}"}}\n' for p, b in per_python.items())
    include += "".join(f'  - {{torch: "{t}", accelerator: cu130, python: "{pythons[0]}", flavor: runtime}}\n'
                       for t in releases[1:])
    path = folder / "matrix.yaml"
    path.write_text(textwrap.dedent(f"""
        version: 1
        base_image: {base}
        registry: 127.0.0.1:{port}/bench
        repository: cuda
        layers: {tree}
        torch_extras: []
        build: {{wheelhouse: {wheels}}}
        matrix:
          torch: ["{releases[0]}"]
          accelerator: [cu130]
          python: {json.dumps(pythons)}
          flavor: [runtime, devel]
        """).lstrip() + ("include:\n" + include if include else ""))
    return path


def imagebuilder(source: Path, step: str, path: Path, report: Path, *flags: str) \
        -> tuple[list[str], subprocess.CompletedProcess[str], float]:
    """`python -m imagebuilder STEP --matrix PATH --report REPORT --quiet FLAGS` with the imagebuilder of SOURCE
    (this checkout, or the before layout's worktree): its command, its process and its wall time."""
    cmd = [sys.executable, "-m", "imagebuilder", step, "--matrix", str(path), "--report", str(report), "--quiet",
           *flags]
    start = time.monotonic()
    proc = subprocess.run(cmd, cwd=source, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(source)})
    return cmd, proc, time.monotonic() - start


def smoke(source: Path, path: Path, report: Path) -> dict[str, Any]:
    """The smoke suite on every leaf the layout just staged (`build --no-push`: each node is found by its key on
    the engine, nothing is rebuilt or pushed). Without a GPU the GPU checks skip and the CPU-side ones run:
    versions (the cuDNN, NCCL and CUDA libraries torch loads, against the pins), a single copy of each library,
    gloo collectives and FSDP, and in devel a CUDA extension compiled with nvcc."""
    cmd, proc, wall = imagebuilder(source, "build", path, report, "--no-push")
    found = json.loads((report / "report.json").read_text())["nodes"] if (report / "report.json").exists() else []
    leaves = {}
    for node in (n for n in found if n["leaf"]):
        checks = (node.get("smoke_report") or {}).get("checks", [])
        status = {c["name"]: c["status"] for c in checks}
        leaves[node["node"]] = {
            "build": node["build"], "smoke": node["smoke"],
            "checks": {s: sum(1 for v in status.values() if v == s) for s in ("pass", "skip", "fail")},
            "failed": sorted(name for name, v in status.items() if v == "fail"),
            "values": {c["name"]: c.get("value") for c in checks if c["name"] in SMOKE_VALUES},
            "statuses": {name: status[name] for name in SMOKE_VALUES if name in status},
        }
    return {"command": " ".join(cmd[1:]), "rc": proc.returncode, "wall_s": round(wall, 1), "leaves": leaves}


SMOKE_VALUES = ("versions.python", "versions.torch", "versions.cuda", "versions.cudnn", "versions.nccl",
                "versions.single_copy", "versions.cuda_libraries", "toolchain.nvcc", "toolchain.cuda_extension")


def measure(name: str, source: Path, port: int, wheels: Path, tree: str, releases: list[str], pythons: list[str],
            bases: tuple[str, dict[str, str]], work: Path, with_smoke: bool = False) -> dict[str, Any]:
    root = work / f"registry-{name}"
    server = registry(port, root)
    try:
        (work / name).mkdir(parents=True, exist_ok=True)
        path = matrix(work / name, port, wheels, tree, releases, pythons, *bases)
        report = work / name / "report"
        cmd, proc, wall = imagebuilder(source, "stage", path, report, "--jobs", "1")
        if proc.returncode != 0:
            sys.exit(f"{name}: stage failed ({proc.returncode})\n{proc.stdout[-4000:]}\n{proc.stderr[-3000:]}")
        nodes = json.loads((report / "report.json").read_text())["nodes"]
        leaves = [n for n in nodes if n["leaf"]]
        key_tag = {n["node"]: f"cache-{n['key'][:12]}" for n in nodes}
        layers = {n["node"]: layers_of(port, "bench/cuda", key_tag[n["node"]]) for n in nodes}
        seen: set[str] = set()
        by_layer: dict[str, int] = {}
        for node in nodes:  # build order: a parent before its children
            fresh = [(d, size) for d, size in layers[node["node"]] if d not in seen]
            seen.update(d for d, _ in fresh)
            by_layer[node["layer"]] = by_layer.get(node["layer"], 0) + sum(size for _, size in fresh)
        first, *rest = leaves
        have = {d for d, _ in layers[first["node"]]}
        pulls = []
        for leaf in rest:
            size = sum(s for _, s in layers[leaf["node"]])
            new = sum(s for d, s in layers[leaf["node"]] if d not in have)
            pulls.append({"after": first["node"], "pull": leaf["node"], "image_bytes": size, "transferred_bytes": new,
                          "ratio": round(new / size, 4)})
        sizes = []
        for leaf in leaves:
            image = leaf["image"]
            inspect = json.loads(sh("docker", "image", "inspect", image))[0]
            du = sh("docker", "run", "--rm", "--user", "0", "--network", "none", "--entrypoint", "du", image,
                    "-sxb", "/")
            content = int(du.split()[0])
            sizes.append({"node": leaf["node"], "image_bytes": inspect["Size"], "content_bytes": content,
                          "ratio": round(inspect["Size"] / content, 4)})
        return {
            "source": str(source), "tree": tree, "build_wall_s": round(wall, 1), "command": " ".join(cmd[1:]),
            "nodes": len(nodes), "leaves": [n["node"] for n in leaves], "images": sorted({n["image"] for n in nodes}),
            "distinct_images": len({n["image"] for n in nodes}),
            "unique_registry_bytes": blob_bytes(root),
            "sum_image_bytes": sum(s for leaf in leaves for _, s in layers[leaf["node"]]),
            "by_layer": by_layer,
            "second_pull": pulls,
            "image_vs_content": sizes,
            **({"smoke": smoke(source, path, work / name / "smoke")} if with_smoke else {}),
        }
    finally:
        server.terminate()
        server.wait(timeout=30)


def cleanup(images: list[str]) -> None:
    """The layout's images off the engine (by the IDs its report names), so the next layout starts with none."""
    if images:
        subprocess.run(["docker", "rmi", "-f", *sorted(set(images))], capture_output=True, check=False)
    sh("docker", "image", "prune", "-f")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--before", default=BEFORE, help="the revision of today's layout")
    parser.add_argument("--torch", action="append", dest="releases", help="torch releases (cu130); the first in "
                        "runtime and devel, the others in runtime (default: 2.12.0 2.12.1, which pin the same "
                        "CUDA libraries)")
    parser.add_argument("--work", type=Path, default=ROOT / "benchmarks" / ".registry-bytes")
    parser.add_argument("--out", default="registry_bytes")
    parser.add_argument("--only", choices=("before", "after"), help="measure one layout (a partial run)")
    parser.add_argument("--smoke", action="store_true", help="then run the smoke suite on the after layout's "
                        "leaves (on this host: its CPU-side checks)")
    second = parser.add_mutually_exclusive_group()
    second.add_argument("--python-prefix", type=Path, help="a CPython install (bin/python3.X, lib/) to use as the "
                        "second Python (default: the newest 3.12 under ~/.pyenv/versions)")
    second.add_argument("--no-second-python", action="store_true", help="Python 3.11 only")
    args = parser.parse_args()
    releases = args.releases or ["2.12.0", "2.12.1"]
    work = args.work
    work.mkdir(parents=True, exist_ok=True)
    pythons = ["3.11"]
    base = "debian:bookworm"
    per_python: dict[str, str] = {}
    prefix = args.python_prefix
    if prefix is None and not args.no_second_python:
        found = sorted(Path.home().glob(".pyenv/versions/3.12.*"))
        if not found:
            sys.exit("no second Python: pass --python-prefix PREFIX (a CPython install), or --no-second-python")
        prefix = found[-1]
    if prefix is not None:
        version = python_version(prefix)
        pythons.append(version)
        base, as_python3 = python_bases(prefix, version, work)
        per_python = {version: as_python3}
    wheels = work / "wheels"
    toolkit = "cuda-toolkit[cccl,crt,nvcc,nvvm]==13.0.2"
    fetched = download(wheels, releases, pythons, toolkit)
    before_src = work / "before-src"
    if not before_src.exists():
        sh("git", "worktree", "add", "--detach", str(before_src), args.before)
    # before: Python 3.11 from debian:bookworm, the second Python from a base whose python3 is it;
    # after: one base image with both Pythons for every entry.
    layouts = {"before": (before_src, 5101, "[base]", ("debian:bookworm", per_python)),
               "after": (ROOT, 5102, AFTER_TREE, (base, {}))}
    meta = {"releases": releases, "python": pythons,
            "second_python": {"prefix": str(prefix), "version": pythons[1]} if prefix else None}
    results: dict[str, Any] = {}
    command = "python benchmarks/registry_bytes.py " + " ".join(sys.argv[1:])
    for name, (source, port, tree, bases) in layouts.items():
        if args.only and name != args.only:
            continue
        shutil.rmtree(work / f"registry-{name}", ignore_errors=True)
        shutil.rmtree(work / name, ignore_errors=True)
        print(f"{name}: staging from {source} into 127.0.0.1:{port}", flush=True)
        results[name] = measure(name, source, port, wheels, tree, releases, pythons, bases,
                                Path(tempfile.mkdtemp(dir=work)), with_smoke=args.smoke and name == "after")
        print(json.dumps(results[name], indent=1), flush=True)
        cleanup(results[name]["images"])
        save(args.out + ("_partial" if args.only else ""), {**meta, "wheel_download_s": round(fetched, 1),
                                                             "layouts": results}, command)
    if "before" in results and "after" in results:
        b, a = results["before"], results["after"]
        summary = {
            "unique_registry_ratio": round(a["unique_registry_bytes"] / b["unique_registry_bytes"], 4),
            "second_pull_ratio_after": [p["ratio"] for p in a["second_pull"]],
            "second_pull_ratio_before": [p["ratio"] for p in b["second_pull"]],
            "image_vs_content_after": max(s["ratio"] for s in a["image_vs_content"]),
            # what the after layout stores, as parts of the before layout's bytes: the CUDA libraries once, and
            # one torch build per (release, Python), which no layout can share
            "after_parts_of_before": {layer: round(size / b["unique_registry_bytes"], 4)
                                      for layer, size in a["by_layer"].items()},
            "goals": {"unique_registry_ratio": 0.40, "second_pull_ratio": 0.30, "image_vs_content": 1.05},
        }
        save(args.out, {**meta, "wheel_download_s": round(fetched, 1), "layouts": results, "summary": summary},
             command)
        print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
