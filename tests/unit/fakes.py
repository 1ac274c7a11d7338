"""In-memory ports (`imagebuilder.ports`): a registry, an engine and a display that behave like the real ones in
what the steps rely on, without subclassing them. An image is its config document and its ID is that
document's digest, as on a real engine, so a pushed image's manifest names its ID as the config digest."""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import re
import tarfile
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from imagebuilder.evidence.signing import Keys
from imagebuilder.evidence.spec import Specs
from imagebuilder.ledger import Ledger
from imagebuilder.plan.plan import Plan
from imagebuilder.ports import LineSink, RunResult
from imagebuilder.ports.reference import parse
from imagebuilder.ports.registry import Registries
from imagebuilder.ports.resolver import Ask, Resolved, ResolveFailed
from imagebuilder.run.context import Images, RunContext
from imagebuilder.run.logs import Logs
from imagebuilder.secrets.scan import Scanner
from imagebuilder.smoke.judge import expected_checks
from imagebuilder.supply.torch_stack import MARK

IMAGE_TYPE = "application/vnd.oci.image.manifest.v1+json"
HOST = "127.0.0.1:5000"


def sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


@dataclass
class FakeRegistry:
    """Blobs and manifests by digest, tags per repository: what a Distribution registry does, in memory."""

    blobs: dict[str, bytes] = field(default_factory=dict)
    manifests: dict[str, tuple[bytes, str]] = field(default_factory=dict)
    tagged: dict[tuple[str, str], str] = field(default_factory=dict)
    host: str = HOST
    auth: tuple[str, str] | None = None
    on_retry: Callable[[str], None] | None = None
    can_untag: bool = True  # False: a registry with deletion turned off
    refuse: set[str] = field(default_factory=set)  # tags whose manifest PUT fails (a registry error)
    read_only: set[str] = field(default_factory=set)  # repositories these credentials may only pull from
    referrers_api: bool = False  # True: an OCI 1.1 registry (the referrers API, OCI-Subject); False: Distribution 2.x
    on_push: list[Callable[[str, str], None]] = field(default_factory=list)  # told of each manifest push (races)
    locks: dict[tuple[str, str], threading.Lock] = field(default_factory=dict)

    def _resolve(self, repo: str, reference: str) -> str | None:
        return reference if reference.startswith("sha256:") and reference in self.manifests \
            else self.tagged.get((repo, reference))

    def manifest_digest(self, repo: str, reference: str) -> str | None:
        return self._resolve(repo, reference)

    def manifest(self, repo: str, reference: str) -> tuple[bytes, str]:
        from imagebuilder.errors import EngineError

        digest = self._resolve(repo, reference)
        if digest is None:
            raise EngineError(f"GET {repo}:{reference}: HTTP 404")
        return self.manifests[digest]

    def put_manifest(self, repo: str, tag: str, body: bytes, media_type: str) -> str:
        digest = sha(body)
        self.manifests[digest] = (body, media_type)
        if not tag.startswith("sha256:"):
            self.tagged[(repo, tag)] = digest
        return digest

    def push_manifest(self, repo: str, tag: str, body: bytes, media_type: str) -> tuple[str, str | None]:
        digest = self.put_manifest(repo, tag, body, media_type)
        for hook in list(self.on_push):
            hook(repo, tag)
        subject = (json.loads(body).get("subject") or {}).get("digest") if self.referrers_api else None
        return digest, subject

    def referrers(self, repo: str, digest: str) -> dict[str, Any] | None:
        if not self.referrers_api:
            return None
        listed = []
        for d, (body, media_type) in self.manifests.items():
            doc = json.loads(body)
            if (doc.get("subject") or {}).get("digest") == digest:
                listed.append({"mediaType": media_type, "digest": d, "size": len(body),
                               "artifactType": doc.get("artifactType") or doc["config"]["mediaType"],
                               **({"annotations": doc["annotations"]} if doc.get("annotations") else {})})
        return {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json", "manifests": listed}

    def deletes_tags(self, repo: str) -> bool:
        return self.referrers_api

    def tag_lock(self, repo: str, tag: str) -> threading.Lock:
        return self.locks.setdefault((repo, tag), threading.Lock())

    def blob(self, repo: str, digest: str) -> bytes:
        return self.blobs[digest]

    @contextlib.contextmanager
    def open_blob(self, repo: str, digest: str) -> Iterator[BinaryIO]:
        yield io.BytesIO(self.blobs[digest])

    def put_blob(self, repo: str, data: bytes) -> str:
        digest = sha(data)
        self.blobs[digest] = data
        return digest

    def tags(self, repo: str) -> list[str]:
        return sorted(t for r, t in self.tagged if r == repo)

    def copy(self, source_repo: str, digest: str, target_repo: str, tag: str) -> str:
        if tag in self.refuse:
            from imagebuilder.errors import EngineError

            raise EngineError(f"registry {self.host}: PUT {target_repo}:{tag}: HTTP 500")
        self.tagged[(target_repo, tag)] = digest
        return digest

    def untag(self, repo: str, tag: str) -> bool:
        if not self.can_untag:
            return False
        return self.tagged.pop((repo, tag), None) is not None

    def config(self, repo: str, reference: str) -> dict[str, Any] | None:
        digest = self._resolve(repo, reference)
        if digest is None:
            return None
        config = json.loads(self.manifests[digest][0]).get("config") or {}
        data = self.blobs.get(str(config.get("digest")))
        return json.loads(data) if data is not None else None

    def labels(self, repo: str, reference: str) -> dict[str, str] | None:
        config = self.config(repo, reference)
        return None if config is None else dict((config.get("config") or {}).get("Labels") or {})

    def can_push(self, repo: str) -> str | None:
        return f"user 'reader' may not push to {self.host}/{repo} (HTTP 401: UNAUTHORIZED)" \
            if repo in self.read_only else None

    def image(self, repo: str, tag: str, content: str) -> tuple[str, str]:
        """Push an image: returns (manifest digest, config digest)."""
        config = self.put_blob(repo, json.dumps({"config": {"Labels": {"x": content}},
                                                 "rootfs": {"type": "layers", "diff_ids": []}}).encode())
        return self.image_of(repo, tag, config), config

    def image_of(self, repo: str, tag: str, config: str, layers: tuple[str, ...] = ()) -> str:
        """Push an image manifest for a config digest (an engine's image ID) and its layer blobs; returns the
        manifest digest."""
        body = json.dumps({"schemaVersion": 2, "mediaType": IMAGE_TYPE,
                           "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": d,
                                       "size": len(self.blobs[d])} for d in layers],
                           "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": config}})
        return self.put_manifest(repo, tag, body.encode(), IMAGE_TYPE)

    def public_tags(self, repo: str) -> dict[str, str]:
        """Tags that are neither key tags nor pass records -> digest."""
        from imagebuilder.evidence import attestation

        return {t: d for (r, t), d in self.tagged.items()
                if r == repo and not t.startswith("cache-") and not attestation.is_evidence_tag(t)}


def layer_tar(files: Mapping[str, bytes]) -> bytes:
    """A layer: a tar of these files (paths without the leading /)."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        for path, data in files.items():
            info = tarfile.TarInfo(path)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


_LABEL = re.compile(r'([A-Za-z0-9._-]+)="((?:[^"\\]|\\.)*)"')


H100 = "NVIDIA H100 80GB HBM3"
DRIVER = "580.65.06"


def suite_report(expect: Mapping[str, Any], commands: list[dict[str, str]], gpus: int = 0, model: str = H100,
                 **statuses: str) -> dict[str, Any]:
    """What an honest suite reports for this image: every check the host expects, passed (`statuses` changes
    some: name -> `pass`, `drop`, or `fail` / `skip` with `:reason`); on GPUs, an H100's throughput and this
    driver."""
    checks = []
    said = {name: value.partition(":")[::2] for name, value in statuses.items()}
    for name in expected_checks(expect, commands, gpu_run=gpus > 0, gpus=gpus):
        status, reason = said.get(name, ("pass", ""))
        if status == "drop":
            continue
        check: dict[str, Any] = {"name": name, "status": status, "reason": reason}
        if name.startswith("throughput.cuda:"):
            check["device"] = model
        if name == "versions.driver":
            check["value"] = DRIVER
        checks.append(check)
    checks += [{"name": n, "status": s, "reason": r} for n, (s, r) in said.items() if s != "drop" and
               n not in {c["name"] for c in checks}]
    return {"passed": all(c["status"] != "fail" for c in checks), "gpu_verified": gpus > 0, "gpus": gpus,
            "checks": checks}


def _arg(command: list[str], flag: str) -> Any:
    return json.loads(command[command.index(flag) + 1]) if flag in command else None


@dataclass
class FakeEngine:
    """Images, tags, builds (their labels read from the Dockerfile's LABEL block), pushes and pulls through a
    FakeRegistry, and containers that run nothing: the suite's report comes from `report(image)`."""

    registry: FakeRegistry
    images: dict[str, dict[str, Any]] = field(default_factory=dict)  # image ID -> its config document
    local_tags: dict[str, str] = field(default_factory=dict)  # reference -> image ID
    pushed: list[str] = field(default_factory=list)
    pulled: list[str] = field(default_factory=list)
    builds: list[tuple[bytes, dict[str, str]]] = field(default_factory=list)  # (context, build args)
    runs: list[str] = field(default_factory=list)  # the images a container ran in
    probes: list[str] = field(default_factory=list)  # the images whose torch stack was probed
    # what the torch-stack probe prints, by image ID or by the layer an image was built for
    stacks: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    gpus: int = 1  # the GPUs a container sees when the host gives it GPUs
    model: str = H100  # what they are
    files: dict[str, list[tuple[str, bytes]]] = field(default_factory=dict)  # image ID -> files of its own layers
    layer_tars: dict[str, bytes] = field(default_factory=dict)  # diff_id -> the layer's tar as pushed (default: empty)
    folders: dict[str, list[str]] = field(default_factory=dict)  # image ID -> its layers as folders (local storage)
    # (image, expect, commands, GPUs seen) -> what the suite in the container reports
    report: Callable[[str, dict[str, Any], list[dict[str, str]], int], dict[str, Any]] | None = None
    run_labels: dict[str, str] = field(default_factory=dict)
    repo_digests: dict[str, list[str]] = field(default_factory=dict)  # image ID -> `repo@digest` pulled or pushed as

    def add(self, doc: dict[str, Any], *refs: str) -> str:
        image = sha(json.dumps(doc, sort_keys=True).encode())
        self.images[image] = doc
        for ref in refs:
            self.local_tags[ref] = image
        return image

    def clone(self) -> FakeEngine:
        return self

    def image_id(self, ref: str) -> str | None:
        if ref in self.images:
            return ref
        by_digest = [i for i, refs in self.repo_digests.items() if ref in refs and i in self.images]
        return by_digest[0] if by_digest else self.local_tags.get(ref)

    def inspect(self, ref: str) -> dict[str, Any]:
        image = self.image_id(ref)
        assert image is not None, ref
        doc = self.images[image]
        return {"Id": image, "Config": doc.get("config") or {}, "RootFS": {"Layers": doc.get("layers") or []},
                "RepoDigests": list(self.repo_digests.get(image, []))}

    def images_with_label(self, label: str, *, every: bool = False) -> list[dict[str, Any]]:
        return [{"Id": i, "Labels": (d.get("config") or {}).get("Labels") or {}, "Created": n, "ParentId": ""}
                for n, (i,
                        d) in enumerate(self.images.items()) if label in ((d.get("config") or {}).get("Labels") or {})]

    def history(self, image: str) -> list[dict[str, Any]]:
        return []

    def layer_files(self, image: str, top: int) -> Iterator[tuple[str, int, BinaryIO]]:
        return iter([(path, len(data), io.BytesIO(data)) for path, data in self.files.get(image, [])])

    def layer_folders(self, image: str) -> list[str] | None:
        return self.folders.get(image)

    def insecure_registries(self) -> tuple[str, ...]:
        return ()

    def storage(self) -> tuple[str, int | None]:
        return "/var/lib/docker", 2**40

    def has_nvidia_runtime(self) -> bool:
        return False

    def build(self, context: bytes, *, network: str, sink: LineSink, nocache: bool = False,
              buildargs: Mapping[str, str] | None = None) -> str:
        self.builds.append((context, dict(buildargs or {})))
        with tarfile.open(fileobj=io.BytesIO(context)) as tar:
            member = tar.extractfile("Dockerfile")
            assert member is not None
            text = member.read().decode()
        block = text.rpartition("\nLABEL ")[2]
        labels = {k: v.replace('\\"', '"').replace("\\$", "$").replace("\\\\", "\\") for k, v in _LABEL.findall(block)}
        parent = text.split("FROM ", 1)[1].split()[0]
        parent = self.image_id(parent) or parent  # (an ID, or a `repo@digest` this engine holds)
        layers = [*(self.images.get(parent, {}).get("layers") or []), sha(context)]
        self.layer_tars.setdefault(sha(context), context)  # (its layer: a tar whose digest is its diff_id)
        sink(f"Successfully built from {parent}")
        return self.add({"config": {"Labels": labels, "Env": []}, "layers": layers,
                         "rootfs": {"type": "layers", "diff_ids": layers}})

    def pull(self, ref: str, sink: LineSink | None = None, *, auth: tuple[str, str] | None = None) -> str:
        parsed = parse(ref)
        body, _ = self.registry.manifest(parsed.repository, parsed.reference)
        config = json.loads(body)["config"]["digest"]
        doc = json.loads(self.registry.blob(parsed.repository, config))
        self.pulled.append(ref)
        image = self.add(doc, *(() if parsed.digest else (ref,)))
        assert image == config, "a pulled image's ID is its config digest"
        self._digested(image, parsed.at(str(self.registry.manifest_digest(parsed.repository, parsed.reference))))
        return image

    def _digested(self, image: str, ref: str) -> None:
        """The engine remembers the manifest digest an image was pulled or pushed as (its RepoDigests)."""
        held = self.repo_digests.setdefault(image, [])
        if ref not in held:
            held.append(ref)

    def push(self, ref: str, sink: LineSink | None = None, *, auth: tuple[str, str] | None = None) -> str:
        parsed = parse(ref)
        image = self.local_tags[ref]
        self.registry.put_blob(parsed.repository, json.dumps(self.images[image], sort_keys=True).encode())
        self.pushed.append(ref)
        blobs = tuple(self.registry.put_blob(parsed.repository, self.layer_tars.get(d) or layer_tar({}))
                      for d in self.images[image].get("layers") or [])
        digest = self.registry.image_of(parsed.repository, parsed.reference, image, blobs)
        self._digested(image, parsed.at(digest))
        return digest

    def tag(self, image: str, ref: str) -> None:
        self.local_tags[ref] = image

    def remove_image(self, ref: str) -> None:
        image = self.image_id(ref)
        self.images.pop(image or "", None)

    def run(self, image: str, command: list[str], *, files: Mapping[str, bytes] | None = None,
            fetch: tuple[str, ...] = (), timeout: float = 600, env: Mapping[str, str] | None = None,
            host_config: Mapping[str, Any] | None = None, user: str | None = None,
            sink: LineSink | None = None) -> RunResult:
        if MARK in command:  # the torch-stack probe of `stage` (supply.torch_stack), not a suite
            self.probes.append(image)
            labels = ((self.images.get(image) or {}).get("config") or {}).get("Labels") or {}
            stack = self.stacks.get(image, self.stacks.get(str(labels.get("io.imagebuilder.layer")), []))
            return RunResult(0, "\n" + json.dumps(stack), {}, 0.0)
        self.runs.append(image)
        given = bool((host_config or {}).get("devices") or (host_config or {}).get("device_requests"))
        expect, commands, gpus = _arg(command, "--expect") or {}, _arg(command, "--commands") or [], \
            self.gpus if given else 0
        report = self.report(image, expect, commands, gpus) if self.report else \
            suite_report(expect, commands, gpus, self.model)
        return RunResult(0 if report.get("passed") else 1, "", {path: json.dumps(report).encode() for path in fetch},
                         0.1)

    def close_containers(self) -> int:
        return 0

    def remove_containers(self, label: str) -> int:
        return 0

    def prune_volumes(self, prefix: str) -> int:
        return 0


@dataclass
class FakeDisplay:
    mode: str = "none"
    said: list[str] = field(default_factory=list)

    def say(self, text: str) -> None:
        self.said.append(text)

    def line(self, activity: str, node_id: str, line: str) -> None:
        pass

    def start(self, activity: str) -> None:
        pass

    def stop(self, activity: str) -> None:
        pass

    def node_done(self, outcome: str) -> None:
        pass

    def show_log(self, node_id: str, path: str) -> None:
        pass


@dataclass
class FakeResolver:
    """`ports.resolver.Resolver` from a table: each requirement `name==version` (or a bare name: `versions`' version)
    resolves to one wheel, with the wheels `needs` says it requires (each at `versions`' version, or a constraint's);
    a file's sha256 is that of `name-version` and `salt`. `asked`: every `Ask`, in order."""

    needs: dict[str, tuple[str, ...]] = field(default_factory=dict)
    versions: dict[str, str] = field(default_factory=dict)
    salt: str = ""
    asked: list[Ask] = field(default_factory=list)

    def resolve(self, ask: Ask) -> tuple[Resolved, ...]:
        self.asked.append(ask)
        pinned = dict(c.split("==", 1) for c in (*ask.constraints, *ask.overrides))
        out: dict[str, str] = {}
        pending = list(ask.requirements)
        while pending:
            name, _, version = pending.pop().partition("==")
            if name in out:
                continue
            version = dict(o.split("==", 1) for o in ask.overrides).get(name) or version or pinned.get(name) \
                or self.versions.get(name, "1.0")
            if name in pinned and pinned[name].split("+")[0] != version.split("+")[0]:
                raise ResolveFailed(f"{name}=={version} conflicts with the constraint {name}=={pinned[name]}")
            out[name] = version
            pending += self.needs.get(name, ())
        return tuple(sorted(
            (Resolved(name, version, f"{name}-{version}-py3-none-any.whl", f"{ask.index}/{name}-{version}.whl",
                      hashlib.sha256(f"{name}-{version}{self.salt}".encode()).hexdigest())
             for name, version in out.items()), key=lambda r: r.name))


def registries(registry: FakeRegistry) -> Registries:
    return Registries(lambda host: registry)


def context(plan: Plan, engine: FakeEngine, folder: Path, *, expect: tuple[tuple[str, str], ...] = (),
            display: FakeDisplay | None = None, secrets: Mapping[str, str] | None = None) -> RunContext:
    """A run's context on the fakes: its ledger, ports, logs under `folder`, the pass mirror in `folder`."""
    ledger = Ledger.of(plan)
    pool = registries(engine.registry)
    logs = Logs(display or FakeDisplay(), folder / "logs", dict(secrets or {}))
    return RunContext(plan, ledger, Images(engine, ledger, pool, logs), pool, logs, Specs(plan, expect),
                      Scanner(dict(secrets or {})), keys(folder), folder / "cache")


def keys(folder: Path) -> Keys:
    """The keys of a machine whose cache folder is `folder` (its own key, made on first use)."""
    return Keys.load(folder / "cache" / "keys", {})
