"""The host's verdict on a suite report. The image under test only reports; the host decides, against what it
expects and what it knows:

- the checks it expects of this image (from its expectations, its layers' checks and whether the host gave the
  container GPUs) must all be in the report: a report that lacks one fails, whatever it says of itself (an image
  can write a report of its own and exit);
- a failed check fails it; on a GPU run so does a skip the matrix does not allow (a skip is not a pass);
- the suite's exit code must be 0, and a report's own `passed` counts for nothing;
- "GPU-verified" is the host's conclusion: it gave the container GPUs, the suite saw and used every one of them
  (its count, its distributed world), and the GPU models and driver the suite reports are the ones this host's
  driver names; a report that names none fails. A CUDA image given GPUs that sees none, or fewer than given,
  fails, naming both and the likely cause; a report that claims GPUs the host never gave fails;
- on several GPUs, the collectives' bus bandwidth must reach its floor for this runner (`smoke.floors`); a
  runner with no measured floor is said ("not gated").

`rules()` is the content hash of the modules and data that judge (this one, the metrics' meaning, the floors,
the regression gate and its measured noise); it is part of every spec key (`evidence.passes.spec_key`), so a pass
judged by other rules is a pass of another spec. Pure."""

from __future__ import annotations

import fnmatch
import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from .floors import Floors
from .metrics import metrics_of
from .runner import GpuHost, SmokeReport

# The files whose content is the host's rules (hashed into every spec key, as the suite's source is).
RULE_FILES = ("smoke/judge.py", "smoke/metrics.py", "smoke/floors.py", "evidence/regression.py",
              "data/busbw_floors.json", "data/perf_noise.json")


def rules() -> str:
    """The content hash of the rules the host judges a report by (`RULE_FILES`)."""
    digest = hashlib.sha256()
    for name in RULE_FILES:
        digest.update(name.encode() + b"\0" + (resources.files("imagebuilder") / name).read_bytes() + b"\0")
    return "host-judge/" + digest.hexdigest()
VERSION_CHECKS = ("python", "torch", "torchvision", "torchaudio", "triton", "accelerator", "cuda", "cudnn", "nccl")


@dataclass(frozen=True)
class Verdict:
    passed: bool
    reasons: tuple[str, ...]  # why not, most telling first
    gpu_verified: bool
    allowed_skips: tuple[str, ...]  # skips of a GPU run that smoke.allow_skip accepted (still said)
    notes: tuple[str, ...] = field(default=())  # what was not judged, said (a runner with no collective floor)

    def why(self) -> str:
        return "; ".join(self.reasons)[:600] or "passed"


def expected_checks(expect: Mapping[str, Any], commands: Iterable[Mapping[str, str]], *, gpu_run: bool,
                    gpus: int | None = None, kinds: tuple[str, ...] = ()) -> list[str]:
    """The checks a whole run of the suite must report for this image (only `kinds`, when given), given `gpus`
    GPUs (None: one, where `gpu_run`)."""
    gpus = 1 if gpus is None else gpus
    cuda = expect.get("accelerator") not in (None, "cpu")
    out = {"versions": [f"versions.{k}" for k in VERSION_CHECKS if k in expect]
           + ["versions.library_path", "versions.single_copy"] + (["versions.cuda_libraries"] if cuda else [])
           + (["versions.gpu_arch", "versions.driver"] if gpu_run else []),
           "health": ["health.shm"] + (["health.user"] if expect.get("user") else []),
           "distributed": ["distributed.nccl_init" if gpu_run else "distributed.gloo_init", "distributed.all_reduce",
                           "distributed.all_gather", "distributed.reduce_scatter", "distributed.barrier_destroy"],
           "fsdp": [f"fsdp.compiled_step_{'cuda' if gpu_run else 'cpu'}",
                    f"fsdp.compiled_graphs_{'cuda' if gpu_run else 'cpu'}"],
           "throughput": [f"throughput.cuda:{i}" for i in range(max(1, gpus))] if gpu_run else ["throughput.cpu"],
           "toolchain": ["toolchain.cc"] + (["toolchain.cpp_extension"] if expect.get("flavor") == "devel" else [])
           + (["toolchain.nvcc", "toolchain.cuda_extension"] if expect.get("flavor") == "devel" and cuda else [])
           + (["toolchain.cuda_kernel"] if expect.get("flavor") == "devel" and gpu_run else []),
           "layers": [str(c["name"]) for c in commands]}
    return [name for kind, names in out.items() if not kinds or kind in kinds for name in names]


def gpu_skips(checks: Sequence[Mapping[str, Any]], *, gpu_run: bool,
              allow: tuple[str, ...] = ()) -> tuple[list[str], list[str]]:
    """(blocking, allowed): the skips of a GPU run, `name: reason`, split by `smoke.allow_skip` (a name, a prefix
    before `.` or `:`, or a glob). On a GPU run a skip is not a pass (an unknown GPU model has no throughput floor;
    a missing driver floor checks nothing); the allowed ones are still said. A CPU run skips the GPU checks by
    design and is judged by what it ran."""
    if not gpu_run:
        return [], []

    def allowed(name: str) -> bool:
        return any(name == p or name.startswith((p + ".", p + ":")) or fnmatch.fnmatchcase(name, p) for p in allow)

    said = [(f"{c.get('name')}: {c.get('reason') or 'skipped'}", allowed(str(c.get("name"))))
            for c in checks if c.get("status") == "skip"]
    return [text for text, ok in said if not ok], [text for text, ok in said if ok]


def _no_gpu_cause(checks: Sequence[Mapping[str, Any]]) -> str:
    """Why a CUDA image given GPUs may have seen none, from what its report says."""
    by_name = {str(c.get("name")): c for c in checks}
    accelerator = by_name.get("versions.accelerator") or {}
    if accelerator.get("status") == "fail":
        return f"its torch is not the expected CUDA build ({accelerator.get('reason') or accelerator.get('value')})"
    if str((by_name.get("versions.driver") or {}).get("reason", "")):
        return f"the driver: {by_name['versions.driver']['reason']}"
    return ("torch found no usable device: the driver's libraries are not visible in the container (the driver "
            "folder mount, LD_LIBRARY_PATH), or CUDA_VISIBLE_DEVICES hides them, or the driver is older than the "
            "image's CUDA")


def _likely_hidden(report: SmokeReport) -> str:
    said = [v for v in report.visible if not v.startswith("NCCL_")]
    return ("likely cause: " + ", ".join(said)) if said else (
        "likely cause: CUDA_VISIBLE_DEVICES or NVIDIA_VISIBLE_DEVICES set in the image (its environment, an "
        "entrypoint or a sitecustomize), or the suite's device selection")


def gpu_truth(report: SmokeReport, checks: Sequence[Mapping[str, Any]], host: GpuHost, seen: int,
              kinds: tuple[str, ...] = ()) -> list[str]:
    """What a GPU run's report must show of the runner the host gave it: every GPU (count, world size), the
    host's models (named by the throughput checks) and driver (by `versions`), for the kinds that ran."""
    reasons = []
    given = host.gpus
    what = f"{given} GPU(s) ({', '.join(host.models) or 'models not known'})"
    if given and seen != given:
        reasons.append(f"the host gave the container {what}; the suite saw {seen}: a pass on fewer GPUs is no pass "
                       f"of this runner; {_likely_hidden(report)}")
    init = next((c for c in checks if c.get("name") == "distributed.nccl_init"), None)
    world = (init.get("value") or {}).get("world_size") if init and isinstance(init.get("value"), dict) else None
    if given and isinstance(world, int) and world != given:
        reasons.append(f"the collectives ran with world size {world}; the host gave the container {what}")
    models = sorted({str(c["device"]) for c in checks if c.get("device")})
    driver = next((str(c.get("value")) for c in checks if c.get("name") == "versions.driver" and c.get("value")), None)
    if host.models and not models and (not kinds or "throughput" in kinds):
        reasons.append(f"the report names no GPU model; this host's driver names {', '.join(host.models)}")
    elif host.models and not set(models) <= set(host.models):
        reasons.append(f"the suite reports GPU model(s) {', '.join(models)}; this host's driver names "
                       f"{', '.join(host.models)}")
    if host.driver and driver != host.driver and (driver or not kinds or "versions" in kinds):
        reasons.append(f"the suite reports driver {driver or 'none'}; this host's driver is {host.driver}")
    return reasons


def judge(report: SmokeReport, expect: Mapping[str, Any], commands: Iterable[Mapping[str, str]], *,
          host: GpuHost, allow_skip: tuple[str, ...] = (), kinds: tuple[str, ...] = (),
          floors: Floors | None = None) -> Verdict:
    """The host's verdict: `report` is what the container said; `report.gpu_mode` is what the host gave it;
    `floors`: the collectives' floors (None: `Floors.measured()`)."""
    checks = [dict(c) for c in report.checks]
    cuda = expect.get("accelerator") not in (None, "cpu")
    given = cuda and report.gpu_mode != "none"
    seen = int(report.raw.get("gpus") or 0) if report.raw else 0
    reasons: list[str] = []
    if not given and (report.gpu_verified or seen > 0) and cuda:
        reasons.append(f"the report claims {seen or 'some'} GPU(s), but the host gave the container none")
    if given and seen == 0 and not any(c.get("name") == "suite" for c in checks):
        reasons.append(f"the host gave the container its GPUs ({report.gpu_mode}), but the suite saw none: likely "
                       f"cause: {_no_gpu_cause(checks)}")
    gpu_run = bool(given and seen > 0)
    truth = gpu_truth(report, checks, host, seen, kinds) if gpu_run else []
    reasons += truth
    failed = [f"{c.get('name')}: {c.get('reason') or 'failed'}" for c in checks if c.get("status") == "fail"]
    reasons += failed
    names = {str(c.get("name")) for c in checks}
    missing = [n for n in expected_checks(expect, commands, gpu_run=gpu_run, gpus=host.gpus or seen or 1,
                                          kinds=kinds) if n not in names]
    if missing and not failed and not truth:  # (a failed check stops the checks after it: its failure is the cause)
        reasons.append(f"the report lacks {len(missing)} expected check(s): {', '.join(missing[:6])}"
                       + (" ..." if len(missing) > 6 else "") + " (a suite cut short, or an image that wrote its "
                       "own report)")
    if report.exit_code != 0 and not reasons:
        reasons.append(f"the suite exited {report.exit_code}")
    blocking, allowed = gpu_skips(checks, gpu_run=gpu_run, allow=allow_skip)
    if blocking:
        reasons.append("a skip is not a pass on a GPU run: " + "; ".join(blocking)
                       + " (fix it, or name the check in smoke.allow_skip)")
    notes: list[str] = []
    if gpu_run and not truth and (not kinds or "distributed" in kinds):
        floors = floors or Floors.measured()
        slow, notes = floors.judge(metrics_of(checks), host.models, host.gpus, host.interconnect)
        if slow:
            nccl = [v for v in report.visible if v.startswith("NCCL_")]
            cause = ", ".join(nccl) if nccl else ("NCCL settings in the image or forwarded from the host "
                                                  "(NCCL_P2P_DISABLE, NCCL_SHM_DISABLE, NCCL_ALGO, NCCL_PROTO), or "
                                                  "another process on the GPUs")
            reasons.append(floors.why(slow, host.models, host.gpus, host.interconnect, cause))
    verified = gpu_run and not truth
    return Verdict(not reasons, tuple(reasons), verified and not reasons, tuple(allowed), tuple(notes))
