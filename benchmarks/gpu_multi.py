"""The multi-GPU proof, run ON a GPU host with 2 or more GPUs, after the kit's engine is up
(`eval "$(bash .gpu-host/start-engine.sh | grep ^export)"`). In one go, writing what it has after every
step (a timeout still leaves the earlier steps' results):

1. `benchmarks/gpu_smoke.py --host-headers --host-cuda`: `imagebuilder build` of tests/gpu/matrix.yaml with
   `--no-push` (the full suite in the container: NCCL with world size = the GPUs, the collectives' exact
   values, FSDP2 sharded over every rank against the unsharded reference, bf16 matmul per GPU), then the
   same suite on the host, and the container/host ratio. If the build's smoke step fails only because a
   check skipped on the GPU run (a skip blocks publishing unless `smoke.allow_skip` names it), that is
   recorded (which check, why), and it runs again on a copy of the matrix in benchmarks/ that allows just
   the skipped checks, so the rest of the evidence still comes;
2. `benchmarks/allreduce_busbw.py` in a container of the built image (the smoke run's GPU options) and on the
   host: all_reduce busbw as nccl-tests measures it, 8 B to 1 GiB, and per-repetition bf16 matmuls;
3. the gradient mutant: the FSDP check alone (`--only fsdp`) from a patched COPY of the suite in which the
   sharded model's weight-matrix gradients (every parameter with 2 or more dimensions) are zeroed after each
   backward; in the container (through imagebuilder's own run_smoke, handed the patched source) and on the
   host. Whether the check fails is recorded as it comes out.

NVLink multicast stays off everywhere (NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1,
NVSHMEM_DISABLE_NVLS=1): set here for every child and forwarded into the containers (tests/gpu/matrix.yaml
sets them in smoke.env too).

    python3 benchmarks/gpu_multi.py --out DIR [--name 2gpu]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SAFE_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
os.environ.update(SAFE_ENV)
os.environ.setdefault("PYTHONUNBUFFERED", "1")

MATRIX = "tests/gpu/matrix.yaml"
ALLOW_SKIP_MATRIX = "benchmarks/gpu_multi_allow_skip.yaml"
BUSBW = ROOT / "benchmarks" / "allreduce_busbw.py"
BLOCKING_SKIP = "a skip is not a pass on a GPU run"

# The gradient mutant: after each backward of the sharded model, its weight matrices' gradients are zeroed.
# (tests/mutants/grad_scale does the same inside FSDP2, as an image layer would; this patches a copy of the suite.)
MUTANT_FIND = ("        loss = _train_step(model, x[mine], y[mine], autocast=False)"
               "  # FSDP's MixedPrecisionPolicy casts itself\n")
MUTANT_REPLACE = MUTANT_FIND + (
    "        zeroed = [p for p in model.parameters() if p.ndim >= 2 and p.grad is not None]  # MUTANT\n"
    "        for p in zeroed:\n"
    "            p.grad.zero_()\n"
    "        out['mutant'] = {'zeroed_grad_tensors': len(zeroed),\n"
    "                         'param_tensors': len(list(model.parameters())),\n"
    "                         'shapes': [list(p.shape) for p in zeroed]}\n"
)
MUTANT_RECORD_FIND = 'step_s=g["step_s"], tolerance=tol,'
MUTANT_RECORD_REPLACE = 'step_s=g["step_s"], mutant=g.get("mutant"), tolerance=tol,'


def now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def say(*parts: Any) -> None:
    print(f"[{now()}]", *parts, flush=True)


def sh(cmd: list[str], log: Path | None = None, timeout: float | None = None, **kw: Any) -> tuple[int, str, float]:
    t0 = time.monotonic()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kw)
        rc, text = proc.returncode, proc.stdout + proc.stderr
    except subprocess.TimeoutExpired as exc:
        rc = 124
        text = f"{(exc.stdout or b'')!s}\n{(exc.stderr or b'')!s}\ntimed out after {timeout} s"
    except OSError as exc:
        rc, text = 127, str(exc)
    if log is not None:
        log.write_text(text)
    return rc, text, round(time.monotonic() - t0, 1)


def host_facts() -> dict[str, Any]:
    rc, smi, _ = sh(["nvidia-smi", "--query-gpu=index,name,driver_version,memory.total,pci.bus_id",
                     "--format=csv,noheader"])
    _, topo, _ = sh(["nvidia-smi", "topo", "-m"])
    _, nvlink, _ = sh(["nvidia-smi", "nvlink", "-s", "-i", "0"])
    _, kernel, _ = sh(["uname", "-r"])
    versions = sh([sys.executable, "-c", "import json,torch; print(json.dumps({'torch': torch.__version__, "
                   "'cuda': torch.version.cuda, 'nccl_compiled': '.'.join(map(str, torch.cuda.nccl.version())), "
                   "'gpus': torch.cuda.device_count()}))"])[1].strip().splitlines()
    try:
        torch_facts = json.loads(versions[-1])
    except (ValueError, IndexError):
        torch_facts = {"error": " | ".join(versions[-3:])}
    return {"devices": [line.strip() for line in smi.strip().splitlines()] if rc == 0 else [],
            "topology": topo.rstrip().splitlines(), "nvlink_gpu0": nvlink.strip().splitlines()[:20],
            "kernel": kernel.strip(), "python": sys.version.split()[0], "host_torch": torch_facts,
            "cpus": os.cpu_count(), "safe_env": {k: os.environ.get(k) for k in SAFE_ENV}}


def check(report: dict[str, Any], name: str) -> dict[str, Any] | None:
    return next((c for c in report.get("checks") or [] if c.get("name") == name), None)


def worst_gap(rec: dict[str, Any] | None) -> float | None:
    if not rec or not isinstance(rec.get("value"), list) or not isinstance(rec.get("expected"), list):
        return None
    pairs = list(zip(rec["value"], rec["expected"], strict=False))
    return round(max(abs(a - b) / max(abs(b), 1e-6) for a, b in pairs), 6) if pairs else None


def fsdp_summary(rec: dict[str, Any] | None) -> dict[str, Any] | None:
    if rec is None:
        return None
    keep = ("status", "reason", "value", "expected", "world_size", "step_s", "duration", "mutant",
            "rerun_with_nccl_debug")
    return {**{k: rec.get(k) for k in keep if k in rec}, "worst_loss_gap": worst_gap(rec)}


def run_smoke_step(out: Path, name: str, matrix: str) -> tuple[int, dict[str, Any], float]:
    cmd = [sys.executable, str(ROOT / "benchmarks/gpu_smoke.py"), "--out", str(out), "--name", name,
           "--matrix", matrix, "--host-headers", "--host-cuda"]
    say("smoke:", " ".join(cmd))
    rc, text, wall = sh(cmd, log=out.parent / f"{out.name}.stdout.txt", cwd=ROOT)
    say(f"smoke rc {rc} in {wall} s")
    print(text[-6000:], flush=True)
    path = out / f"{name}.json"
    return rc, (json.loads(path.read_text()) if path.is_file() else {}), wall


def leaf_of(out: Path) -> dict[str, Any]:
    path = out / "container" / "report.json"
    if not path.is_file():
        return {}
    return next((n for n in json.loads(path.read_text())["nodes"] if n["leaf"]), {})


def allow_names(skipped: list[str]) -> list[str]:
    """Each skipped check exactly: its name where the matrix accepts it, else a glob that matches only it
    (`throughput.cuda:0` -> `throughput.cuda?0`: allow_skip names take no ':')."""
    return sorted({re.sub(r"[^A-Za-z0-9_.*\[\]-]", "?", name) for name in skipped})


def allow_skip_matrix(skipped: list[str]) -> str:
    import yaml

    doc = yaml.safe_load((ROOT / MATRIX).read_text())
    doc["layers_path"] = ["../tests/gpu/layers"]
    doc.setdefault("smoke", {})["allow_skip"] = allow_names(skipped)
    header = (f"# Written by benchmarks/gpu_multi.py on the GPU host ({now()}): {MATRIX} with the smallest\n"
              f"# smoke.allow_skip that lets the GPU run's blocking skips through (see gpu_multi_*.json).\n")
    (ROOT / ALLOW_SKIP_MATRIX).write_text(header + yaml.safe_dump(doc, sort_keys=False))
    return ALLOW_SKIP_MATRIX


def smoke_facts(result: dict[str, Any], leaf: dict[str, Any]) -> dict[str, Any]:
    container = result.get("container") or {}
    host = result.get("host") or {}
    init = check(container, "distributed.nccl_init") or {}
    return {
        "build_exit": result.get("build_exit"), "build_wall_s": result.get("build_wall_s"),
        "node": {k: leaf.get(k) for k in ("node", "status", "build", "smoke", "publish", "error", "image",
                                          "durations")},
        "container": {k: container.get(k) for k in ("passed", "gpu_mode", "gpus", "gpu_verified", "suite_s")},
        "host": {k: host.get(k) for k in ("exit", "passed", "suite_s", "wall_s")},
        "not_pass": {side: [{k: c.get(k) for k in ("name", "status", "reason")} for c in (r.get("checks") or [])
                            if c.get("status") != "pass"] for side, r in (("container", container), ("host", host))},
        "nccl": {"world_size": (init.get("value") or {}).get("world_size"),
                 "init_s": (init.get("value") or {}).get("init_s"),
                 **{op: (check(container, f"distributed.{op}") or {}).get("status")
                    for op in ("all_reduce", "all_gather", "reduce_scatter", "barrier_destroy")}},
        "fsdp": {"container": fsdp_summary(check(container, "fsdp.compiled_step_cuda")),
                 "host": fsdp_summary(check(host, "fsdp.compiled_step_cuda"))},
        "throughput_tflops": result.get("throughput_tflops"),
    }


def container_settings() -> tuple[Any, dict[str, Any]]:
    from imagebuilder.evidence.spec import expectations
    from imagebuilder.input import matrix as matrix_mod
    from imagebuilder.input.compat import CompatTable

    (entry,) = matrix_mod.load(ROOT / MATRIX, CompatTable.load()).entries
    return entry.smoke, expectations(entry, ())


def busbw_in_container(engine: Any, image: str, settings: Any, out: Path) -> dict[str, Any]:
    """allreduce_busbw.py in a fresh container of the image, with the GPU options the smoke run uses."""
    import docker.types

    from imagebuilder.smoke import runner as sr

    devices = sr.nvidia_devices()
    mode = sr.gpu_mode(settings.gpus, has_toolkit=engine.has_nvidia_runtime(), devices=devices)
    gpu_config, gpu_env = sr.gpu_options(mode, devices, settings.driver_dir,
                                         engine.inspect(image)["Config"].get("Env") or [])
    limit = sr.memlock_limit()
    host_config = {"shm_size": settings.shm_size, "network_mode": "none", "tmpfs": {"/tmp": "rw,exec,nosuid,nodev"},
                   "ulimits": [docker.types.Ulimit(name="memlock", soft=limit, hard=limit)], **gpu_config}
    script, report = "/opt/ib-bench/allreduce_busbw.py", "/opt/ib-bench/busbw.json"
    cmd = ["sh", "-c", 'exec "$(command -v python || command -v python3)" "$@"', "bench", script, "--out", report]
    env = sr.container_env(os.environ, dict(settings.env), gpu_env)
    result = engine.run(image, cmd, files={script: BUSBW.read_bytes()}, fetch=(report,), timeout=600,
                        host_config=host_config, env=env)
    (out / "busbw_container.log").write_text(result.logs)
    doc = json.loads(result.files[report]) if report in result.files else {"error": "no report",
                                                                           "log_tail": result.logs[-2000:]}
    doc.update(exit_code=result.exit_code, container_s=round(result.duration, 1), gpu_mode=mode,
               container_env={k: v for k, v in env.items() if k.startswith(("NCCL_", "NVSHMEM_", "TORCH_SYMM"))})
    return doc


def mutant_source() -> tuple[bytes | None, str]:
    text = (ROOT / "imagebuilder/smoke/suite.py").read_text()
    if text.count(MUTANT_FIND) != 1 or text.count(MUTANT_RECORD_FIND) != 1:
        return None, (f"cannot apply the mutant: {MUTANT_FIND.strip()!r} found {text.count(MUTANT_FIND)} times, "
                      f"{MUTANT_RECORD_FIND!r} {text.count(MUTANT_RECORD_FIND)} times in suite.py")
    return text.replace(MUTANT_FIND, MUTANT_REPLACE).replace(MUTANT_RECORD_FIND, MUTANT_RECORD_REPLACE).encode(), ""


def mutant_in_container(engine: Any, image: str, settings: Any, expect: dict[str, Any], source: bytes,
                        out: Path) -> dict[str, Any]:
    """imagebuilder's own run_smoke, `only=("fsdp",)`, handed the patched suite instead of suite.py."""
    from imagebuilder.smoke import runner as sr

    original = sr.suite_source
    sr.suite_source = lambda: source  # run_smoke copies whatever suite_source() returns into the container
    lines: list[str] = []
    try:
        report = sr.run_smoke(engine, image, expect, timeout=900, shm_size=settings.shm_size, gpus=settings.gpus,
                              driver_dir=settings.driver_dir, env=dict(settings.env), sink=lines.append,
                              only=("fsdp",))
    finally:
        sr.suite_source = original
    (out / "mutant_container.log").write_text("\n".join(lines))
    rec = next((c for c in report.checks if c.get("name") == "fsdp.compiled_step_cuda"), None)
    return {"passed": report.passed, "exit_code": report.exit_code, "gpu_verified": report.gpu_verified,
            "gpus": report.raw.get("gpus"), "duration": round(report.duration, 1), "fsdp": fsdp_summary(rec),
            "checks": [{k: c.get(k) for k in ("name", "status", "reason")} for c in report.checks]}


def mutant_on_host(expect: dict[str, Any], source: bytes, out: Path) -> dict[str, Any]:
    patched = out / "suite_grad_zero.py"
    patched.write_bytes(source)
    report = out / "mutant_host.json"
    cmd = [sys.executable, str(patched), "--expect", json.dumps(expect), "--only", "fsdp", "--report", str(report)]
    rc, _text, wall = sh(cmd, log=out / "mutant_host.log", timeout=900, cwd=ROOT)
    data = json.loads(report.read_text()) if report.is_file() else {}
    rec = check(data, "fsdp.compiled_step_cuda")
    return {"exit": rc, "passed": data.get("passed"), "gpus": data.get("gpus"), "wall_s": wall,
            "fsdp": fsdp_summary(rec), "command": "python3 suite_grad_zero.py --expect <host expectations> "
                                                  "--only fsdp --report ..."}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--name", default="2gpu", help="result files: gpu_smoke_NAME.json, gpu_multi_NAME.json")
    args = parser.parse_args()
    out: Path = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    doc: dict[str, Any] = {
        "benchmark": f"gpu_multi_{args.name}",
        "command": f"python3 benchmarks/gpu_multi.py --out $OUT --name {args.name}",
        "date": now(), "argv": sys.argv, "steps_wall_s": {}}
    result_file = out / f"gpu_multi_{args.name}.json"

    def save() -> None:
        doc["total_wall_s"] = round(time.monotonic() - started, 1)
        result_file.write_text(json.dumps(doc, indent=2) + "\n")

    doc["host"] = host_facts()
    save()
    say("devices:", doc["host"]["devices"])

    # 1. the suite: container (through imagebuilder build) and host
    smoke_name = f"gpu_smoke_{args.name}"
    rc, result, wall = run_smoke_step(out / "smoke", smoke_name, MATRIX)
    doc["steps_wall_s"]["smoke"] = wall
    leaf = leaf_of(out / "smoke")
    doc["smoke"] = {"gpu_smoke_exit": rc, "matrix": MATRIX, "result_file": f"{smoke_name}.json",
                    **smoke_facts(result, leaf)}
    smoke_out = out / "smoke"
    if result.get("build_exit") not in (0, None) and BLOCKING_SKIP in str(leaf.get("error") or ""):
        skips = [c for c in (result.get("container") or {}).get("checks") or [] if c.get("status") == "skip"]
        skipped = [c["name"] for c in skips]
        doc["blocking_skip"] = {"error": leaf.get("error"), "first_run": doc["smoke"],
                                "skipped": [{k: c.get(k) for k in ("name", "reason", "value")} for c in skips]}
        save()
        matrix = allow_skip_matrix(skipped)
        doc["blocking_skip"]["rerun_matrix"] = matrix
        doc["blocking_skip"]["allow_skip"] = allow_names(skipped)
        (out / "allow_skip_matrix.yaml").write_text((ROOT / matrix).read_text())
        smoke_out = out / "smoke_allow_skip"
        rc, result, wall = run_smoke_step(smoke_out, smoke_name, matrix)
        doc["steps_wall_s"]["smoke_allow_skip"] = wall
        leaf = leaf_of(smoke_out)
        doc["smoke"] = {"gpu_smoke_exit": rc, "matrix": matrix, "result_file": f"{smoke_name}.json",
                        **smoke_facts(result, leaf)}
    doc["smoke"]["result_dir"] = smoke_out.name
    save()

    image = leaf.get("image")
    settings, expect = container_settings()
    host_expect = {k: v for k, v in expect.items() if k != "user"}
    engine = None
    try:
        from imagebuilder.ports.engine import DockerEngine

        engine = DockerEngine.connect()
    except Exception as exc:  # noqa: BLE001 - recorded; the host steps still run
        doc["engine_error"] = f"{type(exc).__name__}: {exc}"

    # 2. all_reduce busbw: container, then host
    doc["busbw"] = {}
    if engine is not None and image:
        t0 = time.monotonic()
        try:
            doc["busbw"]["container"] = busbw_in_container(engine, image, settings, out)
        except Exception as exc:  # noqa: BLE001
            doc["busbw"]["container"] = {"error": f"{type(exc).__name__}: {exc}"}
        doc["steps_wall_s"]["busbw_container"] = round(time.monotonic() - t0, 1)
        say("busbw container:", {k: doc["busbw"]["container"].get(k) for k in ("max_busbw_gbps", "error")})
        save()
    rc, text, wall = sh([sys.executable, str(BUSBW), "--out", str(out / "busbw_host.json")],
                        log=out / "busbw_host.log", timeout=600, cwd=ROOT)
    doc["busbw"]["host"] = json.loads((out / "busbw_host.json").read_text()) if (out / "busbw_host.json").is_file() \
        else {"error": text[-2000:]}
    doc["busbw"]["host"]["exit"] = rc
    doc["busbw"]["command"] = ("python3 benchmarks/allreduce_busbw.py --out FILE (defaults: 8 B..1 GiB, x2, "
                               "5 warm-up, 20 iters, 3 reps)")
    doc["steps_wall_s"]["busbw_host"] = wall
    say("busbw host:", {k: doc["busbw"]["host"].get(k) for k in ("max_busbw_gbps", "error")})
    save()

    # 3. the gradient mutant: container, then host
    source, why = mutant_source()
    doc["mutant"] = {"what": "FSDP check alone from a patched copy of suite.py: after every backward of the sharded "
                             "model, the gradients of its weight matrices (parameters with ndim >= 2) are zeroed; the "
                             "unsharded reference is untouched",
                     "patch": {"after": MUTANT_FIND.strip(), "inserted": MUTANT_REPLACE.splitlines()[1:],
                               "record": MUTANT_RECORD_REPLACE},
                     "expected": "fsdp.compiled_step_cuda fails"}
    if source is None:
        doc["mutant"]["error"] = why
    else:
        if engine is not None and image:
            t0 = time.monotonic()
            try:
                doc["mutant"]["container"] = mutant_in_container(engine, image, settings, expect, source, out)
            except Exception as exc:  # noqa: BLE001
                doc["mutant"]["container"] = {"error": f"{type(exc).__name__}: {exc}"}
            doc["steps_wall_s"]["mutant_container"] = round(time.monotonic() - t0, 1)
            say("mutant container:", doc["mutant"]["container"].get("fsdp"))
            save()
        t0 = time.monotonic()
        doc["mutant"]["host"] = mutant_on_host(host_expect, source, out)
        doc["steps_wall_s"]["mutant_host"] = round(time.monotonic() - t0, 1)
        say("mutant host:", doc["mutant"]["host"].get("fsdp"))
        caught = [side for side in ("container", "host")
                  if ((doc["mutant"].get(side) or {}).get("fsdp") or {}).get("status") == "fail"]
        doc["mutant"]["caught_in"] = caught
    save()
    say("done in", doc["total_wall_s"], "s")


if __name__ == "__main__":
    main()
