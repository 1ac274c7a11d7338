"""A verify pod as Kubernetes runs it, on the real engine and registry: `plan --format k8s-jobs` for a small CPU
matrix (the session chain's layers under a repository of this test's own, staged with a build key), then each
container of the emitted pod in order (and of the `plan --format argo` Workflow's verify template, its parameters
filled as Argo fills them), as a kubelet would start it (`Kubelet`): the tool image's init step, the
leaf image's suite command and environment, the judge. Only the pod's own volumes are mounted (emptyDirs, the
trust ConfigMap); the keys are `secretKeyRef`s; each container runs with the user, the dropped capabilities and
no-new-privileges its securityContext names. The pass the judge writes is admitted by `imagebuilder check` with
the repository's public keys, each named for its role, and refused with the roles swapped. A leaf image that
writes its own report and exits is refused by the same judge, and writes no pass.

The tool image is the chain's leaf with imagebuilder and its runtime dependencies (copied from this test's own
environment, as `pip install` would place them) and the matrix, its layers and its wheelhouse's listing (each wheel
a stand-in of its name and size: all a key reads of it) at the paths the documents name: "the image with
imagebuilder and this repository's matrix and layers"."""

from __future__ import annotations

import json
import re
import shutil
import uuid
from importlib import metadata
from pathlib import Path
from typing import Any

import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from imagebuilder.ports.engine import DockerEngine

from .conftest import REGISTRY, ROOT, SESSION, Chain, run_cli
from .test_engines import matrix_for, pass_records

ROLES = {"build": "build", "gpu": "gpu", "hosted": "cpu,publish"}  # key name -> the roles it is trusted for


def runtime_files() -> list[tuple[Path, str]]:
    """(file, path under site-packages) of every distribution imagebuilder needs at run time (its requirements
    without extras, and theirs), as installed here; imagebuilder itself comes from the checkout."""
    seen: dict[str, metadata.Distribution] = {}
    todo = list(metadata.requires("imagebuilder") or [])
    while todo:
        req = Requirement(todo.pop())
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        name = canonicalize_name(req.name)
        if name in seen:
            continue
        seen[name] = metadata.distribution(req.name)
        todo += seen[name].requires or []
    out = []
    for dist in seen.values():
        for file in dist.files or []:
            if ".." not in file.parts and "__pycache__" not in file.parts:
                out.append((Path(str(dist.locate_file(file))), str(file)))
    return out


def tool_image(engine: DockerEngine, chain: Chain, matrix: Path, wheelhouse: Path, folder: Path,
               repository: str) -> str:
    """The tool image, pushed beside the leaf (its layers are there already), pinned by digest."""
    context = folder / "tool-context"
    for source, rel in runtime_files():
        target = context / "site" / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target)
    for name in ("imagebuilder", "templates", "layers"):
        shutil.copytree(ROOT / name, context / "app" / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(chain.folder / "layers", context / "project" / "layers")
    shutil.copy2(matrix, context / "project" / matrix.name)
    # The wheelhouse as the pod's imagebuilder reads it: a key names each wheel by its name and size (an unlocked
    # wheelhouse's listing, keys._Hasher.wheelhouse) and no container of a verify pod installs one, so each wheel
    # is a sparse stand-in of its size (torch's real one is ~190 MB the push gzipped again: ~10 CPU-s); a key that
    # read a wheel's bytes would differ from the stage's, and the pod would find nothing staged.
    (context / "wheelhouse").mkdir()
    for wheel in wheelhouse.iterdir():
        if wheel.is_file() and wheel.suffix == ".whl":
            with (context / "wheelhouse" / wheel.name).open("wb") as stand_in:
                stand_in.truncate(wheel.stat().st_size)
        elif wheel.is_file():
            shutil.copy2(wheel, context / "wheelhouse" / wheel.name)
    (context / "Dockerfile").write_text(f"""\
FROM {chain.nodes['task']['image']}
COPY site /opt/imagebuilder/site
COPY app /opt/imagebuilder/app
COPY project {matrix.parent}
COPY wheelhouse {wheelhouse}
COPY bin /opt/imagebuilder/bin
ENV PYTHONPATH=/opt/imagebuilder/site:/opt/imagebuilder/app PATH=/opt/imagebuilder/bin:$PATH
""", encoding="utf-8")
    (context / "bin").mkdir()
    (context / "bin" / "imagebuilder").write_text('#!/bin/sh\nexec "$(command -v python || command -v python3)" '
                                                  '-m imagebuilder "$@"\n', encoding="utf-8")
    (context / "bin" / "imagebuilder").chmod(0o755)
    ref = f"{REGISTRY}/itest/{repository}:tool"
    for event in engine.api.build(path=str(context), tag=ref, rm=True, decode=True, network_mode="none"):
        assert "error" not in event, event
    return f"{REGISTRY}/itest/{repository}@{engine.push(ref)}"


class Kubelet:
    """What a kubelet does with one pod's spec, on the Docker engine: its init containers in order (each must exit
    0 for the next to start), then its container; the pod's volumes and nothing else (an emptyDir is a fresh folder
    anyone may write, a memory one a tmpfs, a ConfigMap its keys as files); `secretKeyRef`/`configMapKeyRef`
    variables from the objects given; the user, dropped capabilities and no-new-privileges of each container's
    securityContext; the pod's network (the host's, where the registry is). A host path, a Secret volume or a
    privileged container fails the test."""

    def __init__(self, engine: DockerEngine, folder: Path, secrets: dict[str, dict[str, str]],
                 configmaps: dict[str, dict[str, str]]) -> None:
        self.engine, self.folder, self.secrets, self.configmaps = engine, folder, secrets, configmaps
        self.started: list[str] = []

    def volumes(self, pod: dict[str, Any]) -> dict[str, tuple[str, str]]:
        """volume name -> (kind, host folder or tmpfs)."""
        out = {}
        for volume in pod["volumes"]:
            name = volume["name"]
            assert set(volume) - {"name"} <= {"emptyDir", "configMap"}, volume  # (no hostPath, no Secret volume)
            if "emptyDir" in volume and volume["emptyDir"].get("medium") == "Memory":
                out[name] = ("tmpfs", "")
                continue
            path = self.folder / "volumes" / name
            path.mkdir(parents=True)
            if "configMap" in volume:
                for key, text in self.configmaps[volume["configMap"]["name"]].items():
                    (path / key).write_text(text, encoding="utf-8")
                    (path / key).chmod(0o644)
            path.chmod(0o777 if "emptyDir" in volume else 0o755)
            out[name] = ("bind", str(path))
        return out

    def env(self, container: dict[str, Any]) -> dict[str, str]:
        out = {}
        for item in container.get("env") or []:
            if "value" in item:
                out[item["name"]] = item["value"]
                continue
            ref = item["valueFrom"].get("secretKeyRef") or item["valueFrom"]["configMapKeyRef"]
            objects = self.secrets if "secretKeyRef" in item["valueFrom"] else self.configmaps
            value = objects.get(ref["name"], {}).get(ref["key"])
            assert value is not None or ref.get("optional"), item
            if value is not None:
                out[item["name"]] = value
        return out

    def start(self, container: dict[str, Any], volumes: dict[str, tuple[str, str]]) -> tuple[int, str]:
        security = container.get("securityContext") or {}
        assert not security.get("privileged") and not (security.get("capabilities") or {}).get("add"), container
        assert "resources" not in container  # (a CPU matrix: no GPU is requested)
        binds, tmpfs = {}, {}
        for mount in container.get("volumeMounts") or []:
            kind, path = volumes[mount["name"]]
            if kind == "tmpfs":
                tmpfs[mount["mountPath"]] = "size=2g"
            else:
                binds[path] = {"bind": mount["mountPath"], "mode": "ro" if mount.get("readOnly") else "rw"}
        user = f"{security['runAsUser']}:{security.get('runAsGroup', security['runAsUser'])}" \
            if "runAsUser" in security else None
        image = container["image"]
        if self.engine.image_id(image) is None:
            self.engine.pull(image)
        if security.get("runAsNonRoot") and user is None:  # (the kubelet's check of the image's USER)
            own = str(self.engine.inspect(image)["Config"].get("User") or "0").split(":")[0]
            assert own.isdigit() and int(own) != 0, f"{image} runs as {own!r}: the kubelet would not start it"
        api = self.engine.api
        host = api.create_host_config(binds=binds, tmpfs=tmpfs, network_mode="host",
                                      cap_drop=(security.get("capabilities") or {}).get("drop"),
                                      security_opt=["no-new-privileges"]
                                      if security.get("allowPrivilegeEscalation") is False else None)
        key, _, value = SESSION.partition("=")
        created = api.create_container(image, entrypoint=container.get("command"), command=container.get("args"),
                                       environment=self.env(container), user=user, host_config=host,
                                       labels={key: value})
        try:
            api.start(created["Id"])
            code = int(api.wait(created["Id"], timeout=1200)["StatusCode"])
            logs = api.logs(created["Id"]).decode(errors="replace")
        finally:
            api.remove_container(created["Id"], force=True)
        self.started.append(container["name"])
        return code, logs

    def run(self, pod: dict[str, Any]) -> dict[str, tuple[int, str]]:
        """container name -> (exit code, log), in the order they ran; an init container that fails ends the pod."""
        volumes = self.volumes(pod)
        out = {}
        for container in pod["initContainers"]:
            out[container["name"]] = self.start(container, volumes)
            if out[container["name"]][0] != 0:
                return out
        for container in pod["containers"]:
            out[container["name"]] = self.start(container, volumes)
        return out


def test_a_verify_pod_runs_the_leaf_image_itself_and_its_pass_counts_with_the_repositorys_keys(
        engine: DockerEngine, registry: str, cpu_chain: Chain, wheelhouse: Path, tmp_path: Path) -> None:
    repository = f"itest-pod-{uuid.uuid4().hex[:8]}"
    keys = tmp_path / "keys"
    for name in ROLES:
        made = run_cli("keys", "new", str(keys / name))
        assert made.code == 0, made.text
    trust = [arg for name, roles in ROLES.items() for arg in ("--trust-key", f"{roles}={keys / name / 'signing.pub'}")]
    matrix = matrix_for(cpu_chain, repository)
    for layer in ("base", "business", "task"):
        cpu_chain.image(engine, layer)
    staged = run_cli(*trust, "stage", "--matrix", str(matrix), "--report", str(tmp_path / "report"),
                     env={"IMAGEBUILDER_BUILD_KEY": str(keys / "build" / "signing.pem")})
    assert staged.code == 0, staged.text[-3000:]
    tool = tool_image(engine, cpu_chain, matrix, wheelhouse, tmp_path, repository)

    planned = run_cli(*trust, "plan", "--matrix", str(matrix), "--format", "k8s-jobs", "--tool-image", tool)
    assert planned.code == 0, planned.text[-3000:]
    assert "hostPath" not in planned.out and "docker.sock" not in planned.out and "privileged" not in planned.out
    (job,) = yaml.safe_load_all(planned.out)
    pod = job["spec"]["template"]["spec"]
    digest = job["metadata"]["annotations"]["imagebuilder.dev/digest"]
    leaf = f"{REGISTRY}/itest/{repository}@{digest}"
    assert [c["image"] for c in [*pod["initContainers"], *pod["containers"]]] == [tool, leaf, tool]
    assert pod["automountServiceAccountToken"] is False
    secrets = {"imagebuilder-keys": {f"{name}.pem": (keys / name / "signing.pem").read_text(encoding="utf-8")
                                     for name in ROLES}}
    trusted = {"imagebuilder-trust": {f"{name}.pub": (keys / name / "signing.pub").read_text(encoding="utf-8")
                                      for name in ROLES}}

    # An image that writes its own report and exits: the judge holds it against the checks it expects, and no
    # pass is written.
    liar = {**pod, "initContainers": [pod["initContainers"][0], {
        **pod["initContainers"][1], "command": ["sh", "-c", 'cd "$0" && echo \'{"checks": [{"name": "versions.torch", '
                                                "\"status\": \"pass\"}], \"passed\": true, \"gpus\": 0}' > report.json "
                                                "&& echo 0 > exit-code", "/var/run/imagebuilder/suite"]}]}
    ran = Kubelet(engine, tmp_path / "liar", secrets, trusted).run(liar)
    assert list(ran) == ["prepare", "suite", "judge"]
    assert ran["prepare"][0] == 0 and ran["suite"][0] == 0, ran
    assert ran["judge"][0] == 1 and "lacks" in ran["judge"][1], ran["judge"][1][-3000:]
    assert not pass_records(registry, repository, digest)

    # The pod as emitted: the suite in the leaf image, the judge's pass beside its digest.
    ran = Kubelet(engine, tmp_path / "pod", secrets, trusted).run(pod)
    assert ran["prepare"][0] == 0 and ran["suite"][0] == 0, ran
    assert '"checks"' in ran["suite"][1]  # (the suite's output is the pod's log)
    assert ran["judge"][0] == 0, ran["judge"][1][-4000:]
    assert pass_records(registry, repository, digest)
    admitted = run_cli("check", *trust, "--policy", "build", "--policy", "pass", leaf)
    assert admitted.code == 0, admitted.text[-3000:]
    swapped = ["--trust-key", f"gpu,cpu,publish={keys / 'build' / 'signing.pub'}",
               "--trust-key", f"build={keys / 'hosted' / 'signing.pub'}"]
    refused = run_cli("check", *swapped, "--policy", "build", "--policy", "pass", leaf)
    assert refused.code == 1, refused.text[-3000:]

    # The same leaf's verify as Argo runs it: the Workflow's verify template, its parameters filled as Argo fills
    # them (the stage task's digest output parameter), each container in order; its judge passes the leaf too.
    planned = run_cli(*trust, "plan", "--matrix", str(matrix), "--format", "argo", "--tool-image", tool)
    assert planned.code == 0, planned.text[-3000:]
    assert "hostPath" not in planned.out and "docker.sock" not in planned.out and "privileged" not in planned.out
    (workflow,) = yaml.safe_load_all(planned.out)
    templates = {t["name"]: t for t in workflow["spec"]["templates"]}
    (task,) = [t for t in templates["plan"]["dag"]["tasks"] if t["template"].startswith("verify-")]
    given = {p["name"]: re.sub(r"\{\{tasks\.[-a-z0-9]+\.outputs\.parameters\.digest\}\}", digest, p["value"])
             for p in task["arguments"]["parameters"]}
    assert given == {"node": pod["containers"][0]["args"][-1], "image": leaf, "digest": digest}
    filled = json.loads(re.sub(r"\{\{inputs\.parameters\.([a-z]+)\}\}", lambda m: given[m.group(1)],
                               json.dumps(templates[task["template"]])))
    argo_pod = {"initContainers": filled["initContainers"], "containers": [filled["container"]],
                "volumes": filled["volumes"]}
    assert [c["image"] for c in [*argo_pod["initContainers"], *argo_pod["containers"]]] == [tool, leaf, tool]
    assert filled["automountServiceAccountToken"] is False
    ran = Kubelet(engine, tmp_path / "argo", secrets, trusted).run(argo_pod)
    assert ran["prepare"][0] == 0 and ran["suite"][0] == 0, ran
    assert ran["judge"][0] == 0, ran["judge"][1][-4000:]
    report = json.loads((tmp_path / "argo" / "volumes" / "work" / "report" / "report.json").read_text("utf-8"))
    assert any(n.get("pass_record") for n in report["nodes"]), report["nodes"]
    admitted = run_cli("check", *trust, "--policy", "build", "--policy", "pass", leaf)
    assert admitted.code == 0, admitted.text[-3000:]

