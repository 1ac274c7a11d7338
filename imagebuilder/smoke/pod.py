"""The suite in a Kubernetes pod, where the leaf image itself is the pod's container: no Docker socket, no
privilege, only the GPUs the pod requests. Three containers share one empty folder (`FOLDER`):

1. the tool image's init step (`imagebuilder node prepare-suite`) writes the suite, what it is told and its
   environment there (`files`);
2. the leaf image, pinned by digest, runs `COMMAND` on the GPUs the pod requested: the suite with its own Python,
   its report, log and exit code written into the folder; the container always exits 0, so the pod goes on to
   the judge whatever the suite said (a verdict is the host's, not the container's exit);
3. the tool image's judge (`imagebuilder node verify --suite-ran-in FOLDER`) reads them back (`read`) as the
   host's report of the run, and judges, signs and records it as a verify on a runner does.

The leaf container wrote the folder: every file read back is hostile (a link to the judge's key, a huge file), so
only regular files are read, never through a link, and each up to a bound. Pure but for `read`."""

from __future__ import annotations

import json
import os
import re
import shlex
import stat
from collections.abc import Mapping
from dataclasses import dataclass

from . import suite_data, suite_source
from .runner import GpuHost, SmokeReport, container_env, report_of
from .spec import Spec

FOLDER = "/var/run/imagebuilder/suite"  # the shared emptyDir, in every container of the pod at this path
SUITE, EXPECT, CHECKS, ENV = "suite.py", "expect.json", "commands.json", "env"  # written by the init step
REPORT, LOG, EXIT = "report.json", "suite.log", "exit-code"  # written by the leaf container
MAX_REPORT, MAX_LOG = 16 << 20, 64 << 20  # what the judge reads of the leaf container's files, at most

TIMEOUT_ENV = "IMAGEBUILDER_SUITE_TIMEOUT"  # smoke.timeout, in seconds: the suite is killed past it
# The leaf container's command: the suite with the image's own Python (as `runner.run_smoke` starts it), held to
# smoke.timeout where the image has `timeout` (else the pod's deadline holds it), its output both in the pod's log
# and in the folder, its exit code into a file; the container itself exits 0.
SCRIPT = (f'cd {FOLDER} && . ./{ENV} && limit="" && if [ -n "${{{TIMEOUT_ENV}:-}}" ] && command -v timeout '
          f'>/dev/null 2>&1; then limit="timeout -s KILL ${TIMEOUT_ENV}"; fi && '
          f'{{ $limit "$(command -v python || command -v python3)" ./{SUITE} --expect "$(cat {EXPECT})" '
          f'--commands "$(cat {CHECKS})" --report {REPORT}; echo "$?" > {EXIT}; }} 2>&1 | tee {LOG}; exit 0')
COMMAND = ("sh", "-c", SCRIPT)


def files(spec: Spec, host_env: Mapping[str, str], timeout: float | None = None) -> dict[str, bytes]:
    """What the init step writes into the folder for a node's spec (`Specs.told`): the suite, its expectations,
    its layer checks and its environment (the host's forwarded NCCL settings and `smoke.env`, each value quoted:
    the matrix's values are not shell text; and `smoke.timeout`, which the leaf's command holds the suite to)."""
    env = {name: value for name, value in container_env(host_env, dict(spec.env), {}).items()
           if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name, flags=re.ASCII)}  # (a host's odd name is no variable)
    if timeout:
        env[TIMEOUT_ENV] = str(int(timeout))
    return {SUITE: suite_source(), **suite_data(),  # (the suite reads its data files beside itself)
            EXPECT: json.dumps(dict(spec.expect), sort_keys=True).encode(),
            CHECKS: json.dumps([dict(c) for c in spec.commands]).encode(),
            ENV: "".join(f"export {name}={shlex.quote(value)}\n" for name, value in sorted(env.items())).encode()}


def _regular(path: str, limit: int) -> bytes | None:
    """A regular file's bytes, never through a link; None when it is missing, not a regular file or too big."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        info = os.fstat(f.fileno())
        if not stat.S_ISREG(info.st_mode) or info.st_size > limit:
            return None
        return f.read(limit + 1)[:limit]


def read(folder: str, *, gpu_mode: str) -> SmokeReport:
    """The report of the suite the leaf container ran in `folder`; `gpu_mode`: what the pod gave it (`pod` when it
    requested GPUs, else `none`). A missing exit code is a suite that never finished (the pod's deadline, a kill)."""
    exit_text = _regular(os.path.join(folder, EXIT), 64)
    code = exit_text.decode(errors="replace").strip() if exit_text is not None else ""
    log = (_regular(os.path.join(folder, LOG), MAX_LOG) or b"").decode(errors="replace")
    report = _regular(os.path.join(folder, REPORT), MAX_REPORT) or b""
    if not re.fullmatch(r"-?[0-9]{1,3}", code, flags=re.ASCII):
        tail = "\n".join(log.strip().splitlines()[-30:])
        return SmokeReport(False, ({"name": "suite", "status": "fail", "reason": "the suite did not finish in the "
                                    "pod's suite container (no exit code: killed, or its deadline passed)"},),
                           0.0, None, log_tail=tail, gpu_mode=gpu_mode)
    return report_of(report, log, int(code), 0.0, gpu_mode, ())


def product_label(model: str) -> str:
    """A GPU model as NVIDIA's GPU feature discovery labels nodes with it (`nvidia.com/gpu.product`): nvidia-smi's
    name with each space a `-`."""
    return "-".join(model.split())


@dataclass(frozen=True)
class Requested:
    """What a verify pod's document requested for the suite's container (its emitter wrote both from one runner):
    the shared folder, the GPU count and the GPU model its node selector names (None: any model)."""

    folder: str = FOLDER
    gpus: int = 0
    model: str | None = None

    @property
    def mode(self) -> str:
        """What the host gave the suite's container, as a report says it (`SmokeReport.gpu_mode`)."""
        return "pod" if self.gpus else "none"

    def unlike(self, host: GpuHost) -> str | None:
        """Why the GPUs the judge's container sees are not what the pod requested (the judge requests the same
        count: the device plugin hands it the suite container's devices); None when they are."""
        if host.gpus != self.gpus:
            return (f"the pod requested {self.gpus} GPU(s) for the suite; its judge container, given the same, sees "
                    f"{host.gpus}: this is not the runner the document asked for")
        labels = sorted({product_label(m) for m in host.models})
        model = (self.model or "").split("-MIG-", 1)[0]  # (a MIG slice: nvidia-smi names its GPU, the parent)
        if model and self.gpus and labels != [model]:
            return f"the pod requested {self.model} GPUs; its judge container sees {', '.join(labels) or 'none'}"
        return None
