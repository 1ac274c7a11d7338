"""The suite in a verify pod (`smoke.pod`): what the init step writes, the leaf container's command run by a real
shell, what the judge reads back of a folder the image under test wrote (never through a link, never too much),
whether the pod's GPUs are the ones it asked for, and a signing key handed over as the PEM itself."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from imagebuilder.errors import InputError
from imagebuilder.evidence.signing import Signer
from imagebuilder.smoke import pod
from imagebuilder.smoke.runner import GpuHost
from imagebuilder.smoke.spec import Spec

SPEC = Spec({"torch": "2.13.0", "accelerator": "cpu"}, "none", "/usr/local/nvidia", "2g",
            env=(("HOSTILE", "$(touch pwned); `touch pwned2` 'x'"),),
            commands=({"name": "layer.task.0", "run": "true"},))


def prepared(folder: Path, suite: str) -> Path:
    """The folder as the init step leaves it, with a stand-in suite (`suite`: its Python source)."""
    for name, data in pod.files(SPEC, {"NCCL_DEBUG": "WARN", "HOME": "/root"}).items():
        (folder / name).write_bytes(data)
    (folder / pod.SUITE).write_text(suite, encoding="utf-8")
    return folder


def run_leaf(folder: Path) -> subprocess.CompletedProcess[str]:
    """`pod.COMMAND` as the leaf container runs it, with the folder at its place."""
    script = pod.SCRIPT.replace(pod.FOLDER, str(folder))
    return subprocess.run(["sh", "-c", script], capture_output=True, text=True, env={"PATH": os.environ["PATH"]})


def test_the_leaf_command_runs_the_suite_with_its_env_quoted_and_always_exits_0(tmp_path: Path) -> None:
    folder = prepared(tmp_path, "import json, os, sys\n"
                                "args = sys.argv[1:]\n"
                                "json.dump({'argv': args, 'env': {k: os.environ.get(k) for k in "
                                "('HOSTILE', 'NCCL_DEBUG', 'NCCL_SOCKET_IFNAME', 'HOME')}}, "
                                "open(args[args.index('--report') + 1], 'w'))\n"
                                "print('said by the suite'); sys.exit(3)\n")
    ran = run_leaf(folder)
    assert ran.returncode == 0 and "said by the suite" in ran.stdout  # (the pod's log)
    assert (folder / pod.EXIT).read_text().strip() == "3" and "said by the suite" in (folder / pod.LOG).read_text()
    told = json.loads((folder / pod.REPORT).read_text())
    argv = told["argv"]
    assert json.loads(argv[argv.index("--expect") + 1]) == SPEC.expect
    assert json.loads(argv[argv.index("--commands") + 1]) == [dict(c) for c in SPEC.commands]
    assert told["env"] == {"HOSTILE": dict(SPEC.env)["HOSTILE"], "NCCL_DEBUG": "WARN", "NCCL_SOCKET_IFNAME": "lo",
                           "HOME": None}  # the matrix's value as written; the host's NCCL settings; nothing else
    assert not list(tmp_path.glob("pwned*")) and not list(Path.cwd().glob("pwned*"))


def test_the_judge_reads_a_report_only_from_regular_files_and_a_missing_exit_code_is_an_unfinished_suite(
        tmp_path: Path) -> None:
    report = {"checks": [{"name": "versions.torch", "status": "pass"}], "passed": True, "gpus": 0}
    (tmp_path / pod.REPORT).write_text(json.dumps(report))
    (tmp_path / pod.LOG).write_text("a log\n")
    unfinished = pod.read(str(tmp_path), gpu_mode="none")
    assert not unfinished.passed and "did not finish" in unfinished.failures()[0] and unfinished.log_tail == "a log"
    (tmp_path / pod.EXIT).write_text("0\n")
    read = pod.read(str(tmp_path), gpu_mode="pod")
    assert read.exit_code == 0 and read.checks == tuple(report["checks"]) and read.gpu_mode == "pod"
    secret = tmp_path / "key.pem"  # the judge's key, as a link in the folder the image wrote would name it
    secret.write_text("-----BEGIN PRIVATE KEY-----\nsecret\n")
    for name in (pod.REPORT, pod.LOG):
        (tmp_path / name).unlink()
        (tmp_path / name).symlink_to(secret)
    linked = pod.read(str(tmp_path), gpu_mode="none")
    assert not linked.passed and "without a report" in linked.failures()[0] and "secret" not in linked.log_tail
    (tmp_path / pod.REPORT).unlink()
    with (tmp_path / pod.REPORT).open("wb") as big:
        big.truncate(pod.MAX_REPORT + 1)
    assert "without a report" in pod.read(str(tmp_path), gpu_mode="none").failures()[0]


def test_the_judge_sees_the_gpus_the_pod_requested_or_says_what_it_sees() -> None:
    h100 = ("NVIDIA H100 80GB HBM3",)
    asked = pod.Requested(gpus=2, model="NVIDIA-H100-80GB-HBM3")
    assert asked.unlike(GpuHost(models=h100, count=2)) is None
    assert "sees 1" in str(asked.unlike(GpuHost(models=h100, count=1)))
    assert "NVIDIA-A100" in str(asked.unlike(GpuHost(models=("NVIDIA A100-SXM4-80GB",), count=2)))
    assert pod.Requested(gpus=1).unlike(GpuHost(models=h100, count=1)) is None  # (model: any)
    assert "sees 1" in str(pod.Requested().unlike(GpuHost(models=h100, count=1)))  # a CPU pod given a GPU
    assert (pod.Requested().mode, asked.mode) == ("none", "pod")
    assert pod.product_label("NVIDIA H100 80GB HBM3") == "NVIDIA-H100-80GB-HBM3"


def test_a_signing_key_may_be_the_pem_itself_and_a_bad_one_names_its_variable() -> None:
    key = Signer.generate()
    pem = key.private_pem().decode()
    assert Signer.of_env("IMAGEBUILDER_SIGNING_KEY", pem).public.keyid == key.public.keyid
    with pytest.raises(InputError, match=r"\$IMAGEBUILDER_BUILD_KEY"):
        Signer.of_env("IMAGEBUILDER_BUILD_KEY", "-----BEGIN PRIVATE KEY-----\nnot a key\n-----END PRIVATE KEY-----\n")


def test_the_pod_options_of_node_verify_go_together(capsys: pytest.CaptureFixture[str]) -> None:
    from imagebuilder.cli import main

    base = ["--offline", "--engine", "unix:///nonexistent.sock", "node", "verify"]
    assert main([*base, "--requested-gpus", "2", "e/task"]) == 2
    assert "need --suite-ran-in" in capsys.readouterr().err
    assert main([*base, "--suite-ran-in", "/nonexistent", "e/task"]) == 2
    assert "needs --digest" in capsys.readouterr().err
    assert main(["--base-image-id", "debian:bookworm=latest", "plan"]) == 2
    assert "IMAGE=sha256:" in capsys.readouterr().err


def test_the_leaf_command_holds_the_suite_to_its_timeout(tmp_path: Path) -> None:
    """smoke.timeout reaches the leaf's command: a suite past it is killed (exit 137, no report), and the judge
    reads a suite that exited without a report (seen failing: without the timeout the stand-in runs its 60 s)."""
    for name, data in pod.files(SPEC, {}, timeout=1).items():
        (tmp_path / name).write_bytes(data)
    (tmp_path / pod.SUITE).write_text("import time\ntime.sleep(60)\n", encoding="utf-8")
    ran = subprocess.run(["sh", "-c", pod.SCRIPT.replace(pod.FOLDER, str(tmp_path))], capture_output=True,
                         text=True, env={"PATH": os.environ["PATH"]}, timeout=30)
    assert ran.returncode == 0 and (tmp_path / pod.EXIT).read_text().strip() == "137"
    assert "exited 137 without a report" in pod.read(str(tmp_path), gpu_mode="none").failures()[0]


def test_what_the_leaf_leaves_never_crashes_the_judge(tmp_path: Path) -> None:
    """A report nested past Python's stack, an exit code of other digits than ASCII: a failed suite, said."""
    (tmp_path / pod.REPORT).write_text("[" * 100_000 + "]" * 100_000)
    (tmp_path / pod.EXIT).write_text("0")
    assert "without a report" in pod.read(str(tmp_path), gpu_mode="none").failures()[0]
    (tmp_path / pod.EXIT).write_text("\u00b2")
    assert "did not finish" in pod.read(str(tmp_path), gpu_mode="none").failures()[0]


def test_a_mig_slice_is_judged_by_its_gpu_and_a_key_variable_is_never_printed(tmp_path: Path) -> None:
    asked = pod.Requested(gpus=1, model="NVIDIA-A100-SXM4-40GB-MIG-1g.5gb")
    assert asked.unlike(GpuHost(models=("NVIDIA A100-SXM4-40GB",), count=1)) is None
    assert asked.unlike(GpuHost(models=("NVIDIA H100 80GB HBM3",), count=1)) is not None
    secret = "MC4CAQAwBQYDK2VwBCIEIGW0c2VjcmV0c2VjcmV0c2VjcmV0c2VjcmV0c2VjcmV0"  # (base64 DER, not PEM)
    with pytest.raises(InputError) as refused:
        Signer.of_env("IMAGEBUILDER_SIGNING_KEY", secret)
    assert secret not in refused.value.message and "neither a PEM" in refused.value.message
