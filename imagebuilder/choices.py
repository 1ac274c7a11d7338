"""The choices and limits the command line's help shows, each declared once, here, for the module that owns it
(named beside it), so that `imagebuilder --help` is drawn without importing that module and what it imports
(issue 52: a command imports what it uses when it runs). The matrix's own defaults and bounds are the schema's
(`declarations/schema.py`, as light). Imports nothing."""

from __future__ import annotations

FLOORS = ("throughput_floor", "cpu_gflops_floor")  # evidence.spec: expectations --expect may raise, never lower
POLICIES = ("pass", "gpu", "build", "sbom", "vsa")  # evidence.admission: what `check --policy` may ask
LOG_MODES = ("stream", "tail", "none")  # run.display: how a run shows its steps (`--logs`)
EMIT_FORMATS = ("graph", "github-actions", "buildkite", "argo", "k8s-jobs")  # emit.formats: one per `ENGINES` emitter
CPU_RUNNER = ("ubuntu-24.04",)  # emit.settings: GitHub runs-on labels of CPU jobs, and of GPU jobs
GPU_RUNNER = ("self-hosted", "linux", "x64", "gpu")  # (`--cpu-runner`, `--gpu-runner`)
MAX_JOBS = 256  # plan.waves: jobs one strategy matrix may make (docs.github.com/en/actions/reference/limits)
