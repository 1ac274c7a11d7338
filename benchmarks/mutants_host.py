"""The CPU mutants of tests/mutants, applied on THIS host (no image, no engine) to the suite run with torch from
--python: for each, the suite (only the check kinds that matter) in a fresh process whose environment carries
the mutant (a sitecustomize.py folder on PYTHONPATH, an ENV, an LD_PRELOAD, a patched copy of torch, a mount
namespace with a small /dev/shm), and whether the check that must catch it failed. The image-layer version of
the same table (tests/mutants' seeds built into layers of the CPU chain) is benchmarks/results/mutants.json.

Every run gets a fresh, empty Inductor cache (as a fresh container's /tmp is): compile really runs.

    python benchmarks/mutants_host.py --python /tmp/torchvenv/bin/python [--only grad_zero,slow_matmul]

Writes results/mutants_host_cpu.json: one row per mutant with the expected check, the checks that failed,
caught (the expected one failed), and the wall time; a clean row per kind set must pass.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SUITE = ROOT / "imagebuilder" / "smoke" / "suite.py"
MUTANTS = ROOT / "tests" / "mutants"
EXPECT = {"torch": "2.13.0", "accelerator": "cpu", "python": "3.11", "flavor": "runtime", "cuda": None,
          "cudnn": None, "nccl": None, "triton": None, "torchvision": None, "torchaudio": None}
USER = {"uid": 1000, "gid": 1000, "home": "/home/ml"}
HANG_TIMEOUT = 30.0

Setup = Callable[[Path, dict[str, str]], list[str]]  # (scratch folder, env to change) -> a command prefix


def on_path(folder: str) -> Setup:
    def setup(_tmp: Path, env: dict[str, str]) -> list[str]:
        env["PYTHONPATH"] = str(MUTANTS / folder)
        return []
    return setup


def env_file(folder: str, extra: dict[str, str] | None = None) -> Setup:
    def setup(_tmp: Path, env: dict[str, str]) -> list[str]:
        for line in (MUTANTS / folder / "env").read_text().splitlines():
            key, _, value = line.partition("=")
            env[key] = value
        env.update(extra or {})
        return []
    return setup


def nccl_preload(tmp: Path, env: dict[str, str]) -> list[str]:
    stub = tmp / "libnccl.so.2"
    subprocess.run(["cc", "-shared", "-fPIC", "-x", "c", "-o", str(stub), "-"], check=True, text=True,
                   input="int ncclGetVersion(int *v) { *v = 22000; return 0; }\n")
    env["LD_PRELOAD"] = str(stub)
    return []


def torch_path(python: str) -> Setup:
    def setup(tmp: Path, env: dict[str, str]) -> list[str]:
        shutil.copy(Path(torch_dir(python)) / "lib" / "libc10.so", tmp / "libc10.so")
        env["LD_LIBRARY_PATH"] = str(tmp)
        return []
    return setup


def torch_version(python: str, mode: str) -> Setup:
    """A copy of the torch package and its dist-info first on PYTHONPATH, then tests/mutants/torch_version."""
    def setup(tmp: Path, env: dict[str, str]) -> list[str]:
        src = Path(torch_dir(python))
        site = tmp / "site"
        shutil.copytree(src, site / "torch", symlinks=True)
        for info in src.parent.glob("torch-*.dist-info"):
            shutil.copytree(info, site / info.name)
        env["PYTHONPATH"] = str(site)
        subprocess.run([python, str(MUTANTS / "torch_version" / "mutate.py"), mode], check=True, env=env)
        return []
    return setup


def small_shm(_tmp: Path, _env: dict[str, str]) -> list[str]:
    """A private mount namespace with a 64 MiB tmpfs over /dev/shm (needs root; the engine does it with shm_size)."""
    return ["unshare", "-m", "sh", "-c", 'mount -t tmpfs -o size=64m tmpfs /dev/shm && exec "$@"', "shm"]


def torch_dir(python: str) -> str:
    return subprocess.run([python, "-c", "import importlib.util, os; "
                           "print(os.path.dirname(importlib.util.find_spec('torch').origin))"],
                          capture_output=True, text=True, check=True).stdout.strip()


def layer_commands() -> list[dict[str, str]]:
    lines = (MUTANTS / "failing_layer_check" / "layer.yaml").read_text().splitlines()
    runs = [ln.strip()[2:] for ln in lines[lines.index("smoke:") + 1:] if ln.strip().startswith("- ")]
    return [{"name": f"layer.failing_layer_check.{i}", "run": cmd} for i, cmd in enumerate(runs)]


def plan(python: str) -> list[tuple[str, str, str, Setup | None, dict[str, Any]]]:
    """(mutant, check kinds to run, the check that must fail, how, extra expectations)"""
    return [
        ("clean", "fsdp,throughput,versions", "", None, {}),
        ("clean_health_and_layers", "health,layers", "", None, {}),
        ("grad_zero", "fsdp", "fsdp.compiled_step_cpu", env_file_path("grad_scale", "0"), {}),
        ("grad_half", "fsdp", "fsdp.compiled_step_cpu", env_file_path("grad_scale", "0.5"), {}),
        ("grad_double", "fsdp", "fsdp.compiled_step_cpu", env_file_path("grad_scale", "2"), {}),
        ("compile_noop", "fsdp", "fsdp.compiled_graphs_cpu", on_path("compile_noop"), {}),
        ("dynamo_disabled", "fsdp", "fsdp.compiled_graphs_cpu", env_file("dynamo_disabled"), {}),
        ("compile_fallback", "fsdp", "fsdp.compiled_graphs_cpu", env_file("compile_fallback"), {}),
        ("lib_shadow_nccl_preload", "versions", "versions.library_path", nccl_preload, {}),
        ("lib_shadow_torch_path", "versions", "versions.library_path", torch_path(python), {}),
        ("torch_version", "versions", "versions.torch", torch_version(python, "version"), {}),
        ("torch_metadata", "versions", "versions.torch", torch_version(python, "metadata"), {}),
        ("slow_matmul", "throughput", "throughput.cpu", on_path("slow_matmul"), {}),
        ("shm_small", "health", "health.shm", small_shm, {}),
        ("root_user", "health", "health.user", None, {"user": USER}),
        ("failing_layer_check", "layers", "layer.failing_layer_check.0", None, {}),
        ("hang", "versions", "suite", on_path("hang"), {}),
    ]


def env_file_path(folder: str, scale: str) -> Setup:
    def setup(_tmp: Path, env: dict[str, str]) -> list[str]:
        env["PYTHONPATH"] = str(MUTANTS / folder)
        env["IB_MUTANT_GRAD_SCALE"] = scale
        return []
    return setup


def run_one(python: str, name: str, kinds: str, want: str, setup: Setup | None,
            extra: dict[str, Any]) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix=f"ib-mutant-{name}-") as scratch:
        tmp = Path(scratch)
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "LD_PRELOAD", "LD_LIBRARY_PATH")}
        env["TORCHINDUCTOR_CACHE_DIR"] = str(tmp / "inductor")
        prefix = setup(tmp, env) if setup else []
        commands = layer_commands() if name in ("failing_layer_check", "clean_health_and_layers") else []
        if name == "clean_health_and_layers":
            commands = [{"name": "layer.clean.0", "run": "true"}]
        report = tmp / "report.json"
        cmd = [*prefix, python, str(SUITE), "--only", kinds, "--expect", json.dumps({**EXPECT, **extra}),
               "--commands", json.dumps(commands), "--report", str(report)]
        t0 = time.monotonic()
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                                start_new_session=True)
        try:
            out, _ = proc.communicate(timeout=HANG_TIMEOUT if name == "hang" else 900)
            rc: int | None = proc.returncode
            tail = out.strip().splitlines()[-3:]
        except subprocess.TimeoutExpired:  # the runner's timeout, emulated: the whole process group goes
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            rc, tail = None, [f"timed out after {HANG_TIMEOUT:.0f} s; killed"]
        wall = round(time.monotonic() - t0, 1)
        data = json.loads(report.read_text()) if report.is_file() else {}
    checks = data.get("checks") or []
    failed = [c["name"] for c in checks if c["status"] == "fail"] or (["suite"] if rc is None else [])
    row = {"mutant": name, "kinds": kinds, "expected_check": want or None, "failed_checks": failed,
           "exit": rc, "wall_s": wall,
           "caught": (want in failed) if want else None, "clean_passed": (rc == 0 and not failed) if not want else None,
           "reasons": {c["name"]: c["reason"][:300] for c in checks if c["status"] == "fail"},
           "gaps": {c["name"]: {k: c.get(k) for k in ("value", "param_gap", "grad_gap", "loss_drop", "tolerance")
                                if k in c} for c in checks if c["name"].startswith("fsdp.")},
           "statuses": {c["name"]: c["status"] for c in checks}}
    if rc is None:
        row["tail"] = tail
    return row


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--python", required=True, help="an interpreter with torch (CPU)")
    parser.add_argument("--only", default="", help="comma-separated mutant names")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "mutants_host_cpu.json")
    args = parser.parse_args()
    wanted = set(filter(None, args.only.split(",")))
    rows = []
    for name, kinds, want, setup, extra in plan(args.python):
        if wanted and name not in wanted:
            continue
        rows.append(run_one(args.python, name, kinds, want, setup, extra))
        r = rows[-1]
        verdict = "CAUGHT" if r["caught"] else "clean ok" if r["clean_passed"] else "MISSED"
        print(f"{name:26} expected {want or '(clean)':30} failed {r['failed_checks']} {verdict} {r['wall_s']} s",
              flush=True)
    mutants = [r for r in rows if r["expected_check"]]
    doc = {
        "benchmark": "mutants_host",
        "command": "python benchmarks/mutants_host.py --python PYTHON_WITH_TORCH" + (f" --only {args.only}"
                                                                                   if args.only else ""),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version()},
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "mutation_score": f"{sum(bool(r['caught']) for r in mutants)}/{len(mutants)}",
        "clean_passed": all(r["clean_passed"] for r in rows if not r["expected_check"]),
        "rows": rows,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    print(json.dumps({k: doc[k] for k in ("mutation_score", "clean_passed")}))
    sys.exit(0 if doc["clean_passed"] and all(r["caught"] for r in mutants) else 1)


if __name__ == "__main__":
    main()
