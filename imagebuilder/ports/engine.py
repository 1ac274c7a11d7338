"""The one seam to docker-py: streamed build, run, tag, push (errors checked), inspect.

docker-py does not raise on errors reported inside a build or push stream; every stream here is
read to the end and an `error`/`errorDetail` record fails the operation.
"""

from __future__ import annotations

import io
import json
import os
import re
import tarfile
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from typing import Any, BinaryIO, cast

import docker
import docker.errors
import requests.exceptions
import tenacity

from ..errors import EngineError, EngineUnavailable
from . import LineSink, RunResult
from .reference import parse
from .tls import CERTS_D

MANAGED_LABEL = "io.imagebuilder.managed"


@dataclass
class Containers:
    """The containers an engine object and its clones have created and not yet removed. Once closed, no
    new one is created: a worker thread that was about to start a container when the run was interrupted
    cannot leave one behind after the clean-up."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    ids: set[str] = field(default_factory=set)
    closed: bool = False


class DockerEngine:
    """A connected Docker engine (the `ports.Engine` of every command)."""

    def __init__(self, api: docker.APIClient, run_labels: Mapping[str, str] | None = None,
                 base_url: str | None = None, containers: Containers | None = None) -> None:
        self.api = _local(api)
        self.run_labels = dict(run_labels or {})  # put on every container this engine object creates
        self.base_url = base_url
        self.containers = containers or Containers()

    def clone(self) -> DockerEngine:
        """Another connection to the same engine, for another thread (one HTTP session each); it shares
        the container bookkeeping, so `close_containers` reaches what every clone started."""
        timeout = int(self.api.timeout)
        api = docker.APIClient(base_url=self.base_url, timeout=timeout) if self.base_url \
            else docker.from_env(timeout=timeout).api
        return DockerEngine(api, self.run_labels, self.base_url, self.containers)

    def close_containers(self) -> int:
        """Remove every container this engine object and its clones started, and create none from now on;
        returns how many were removed."""
        with self.containers.lock:
            self.containers.closed = True
            ids = sorted(self.containers.ids)
        removed = 0
        for cid in ids:
            with suppress(docker.errors.APIError, requests.exceptions.RequestException):
                self.api.remove_container(cid, force=True, v=True)
                removed += 1
        return removed

    @classmethod
    def connect(cls, base_url: str | None = None, timeout: int = 600) -> DockerEngine:
        try:
            if base_url:
                api = docker.APIClient(base_url=base_url, timeout=timeout)
            else:
                api = docker.from_env(timeout=timeout).api
            api.ping()
        except (docker.errors.DockerException, requests.exceptions.RequestException, OSError) as exc:
            raise EngineUnavailable(
                f"cannot reach a Docker engine ({_short(exc)})",
                hint="start dockerd (`make engine` does it) or set DOCKER_HOST") from None
        return cls(api, base_url=base_url)

    # -- images -----------------------------------------------------------------------------
    def image_id(self, ref: str) -> str | None:
        try:
            return str(self.api.inspect_image(ref)["Id"])
        except docker.errors.ImageNotFound:
            return None
        except docker.errors.APIError as exc:
            if exc.status_code == 404:
                return None
            raise EngineError(f"inspecting {ref}: {_short(exc)}") from None

    def images_with_label(self, label: str, *, every: bool = False) -> list[dict[str, Any]]:
        """Local images that carry a label (any value), with their labels, creation times and parents.
        `every`: also the images `docker images` hides (untagged ones that have children, build steps)."""
        try:
            return [dict(i) for i in self.api.images(filters={"label": label}, all=every)]
        except docker.errors.APIError as exc:
            raise EngineError(f"listing images: {_short(exc)}") from None

    def insecure_registries(self) -> tuple[str, ...]:
        """Registries the engine speaks plain HTTP to (its `insecure-registries`, not CIDRs)."""
        try:
            configs = (self.api.info().get("RegistryConfig") or {}).get("IndexConfigs") or {}
        except docker.errors.APIError:
            return ()
        return tuple(name for name, conf in configs.items() if isinstance(conf, dict) and not conf.get("Secure", True))

    def inspect(self, ref: str) -> dict[str, Any]:
        try:
            return dict(self.api.inspect_image(ref))
        except docker.errors.APIError as exc:
            raise EngineError(f"inspecting {ref}: {_short(exc)}") from None

    def pull(self, ref: str, sink: LineSink | None = None, *, auth: tuple[str, str] | None = None) -> str:
        repo, tag = _split_ref(ref)
        try:
            stream = self.api.pull(repo, tag=tag, stream=True, decode=True, auth_config=_auth_config(auth))
            _drain(stream, sink, f"pull {ref}")
        except docker.errors.APIError as exc:
            raise EngineError(_untrusted(ref, f"pull {ref}: {_short(exc)}")) from None
        except EngineError as exc:
            raise EngineError(_untrusted(ref, exc.message)) from None
        image = self.image_id(ref)
        if image is None:
            raise EngineError(f"pull {ref}: finished but the image is not there")
        return image

    def build(self, context: bytes, *, network: str, sink: LineSink, nocache: bool = False,
              buildargs: Mapping[str, str] | None = None) -> str:
        """Build from an in-memory tar context; returns the image ID."""
        try:
            stream = self.api.build(
                fileobj=io.BytesIO(context), custom_context=True, rm=True, forcerm=True, pull=False,
                decode=True, network_mode=network, nocache=nocache, buildargs=dict(buildargs or {}),
            )
            records = _drain(stream, sink, "build")
        except docker.errors.APIError as exc:
            raise EngineError(f"build: {_short(exc)}") from None
        image = None
        for rec in records:
            aux = rec.get("aux")
            if isinstance(aux, dict) and "ID" in aux:
                image = str(aux["ID"])
        if image is None:
            for rec in reversed(records):
                text = str(rec.get("stream", ""))
                if text.startswith("Successfully built "):
                    image = self.image_id(text.split()[-1])
                    break
        if image is None:
            raise EngineError("build finished without an image ID")
        return image

    def storage(self) -> tuple[str, int | None]:
        """The engine's data folder and its free bytes (None when the engine is not on this machine)."""
        try:
            root = str(self.api.info().get("DockerRootDir") or "")
        except docker.errors.APIError:
            return "", None
        try:
            st = os.statvfs(root) if root else None
        except OSError:
            st = None
        return root, None if st is None else st.f_bavail * st.f_frsize

    def layer_files(self, image: str, top: int) -> Iterator[tuple[str, int, BinaryIO]]:
        """The regular files the image's `top` newest layers hold: (path in the image, size, a stream of its
        bytes). Read from the engine's own storage where it is on this machine and readable (overlay2:
        the image's UpperDir and the first LowerDirs), else from an export of the whole image (every
        layer: slower, and a secret in a parent is a leak too)."""
        info = self.inspect(image)
        driver = info.get("GraphDriver") or {}
        data = driver.get("Data") or {}
        dirs = [data.get("UpperDir") or "", *(data.get("LowerDir") or "").split(":")][:top] \
            if driver.get("Name") == "overlay2" else []
        if top > 0 and dirs and all(d and os.path.isdir(d) and os.access(d, os.R_OK | os.X_OK) for d in dirs):
            for folder in dirs:
                yield from _folder_files(folder)
            return
        try:
            chunks = self.api.get_image(image, chunk_size=1 << 20)
            with tarfile.open(fileobj=_ChunkReader(chunks), mode="r|") as outer:
                for member in outer:
                    if member.isfile() and (member.name.endswith("/layer.tar") or member.name.startswith("blobs/")):
                        layer = outer.extractfile(member)
                        assert layer is not None
                        with tarfile.open(fileobj=layer, mode="r|") as inner:
                            for item in inner:
                                stream = inner.extractfile(item) if item.isfile() else None
                                if stream is not None:
                                    yield "/" + item.name.lstrip("./"), item.size, cast(BinaryIO, stream)
        except (docker.errors.APIError, tarfile.TarError) as exc:
            raise EngineError(f"reading the layers of {image[:19]}: {exc}") from None

    def layer_folders(self, image: str) -> list[str] | None:
        """The image's layers as folders of the engine's own storage, bottom first, one per entry of its
        RootFS.Layers, where the engine is on this machine (overlay2, rootful: as root, whose eyes see its
        `trusted.overlay.*` attributes) and they are readable; None otherwise."""
        if os.geteuid() != 0:
            return None
        try:
            info = self.inspect(image)
        except EngineError:
            return None
        driver = info.get("GraphDriver") or {}
        data = driver.get("Data") or {}
        if driver.get("Name") != "overlay2" or not data.get("UpperDir"):
            return None
        dirs = [str(data["UpperDir"]), *(str(data["LowerDir"]).split(":") if data.get("LowerDir") else [])]
        if len(dirs) != len((info.get("RootFS") or {}).get("Layers") or []) or \
                not all(os.path.isdir(d) and os.access(d, os.R_OK | os.X_OK) for d in dirs):
            return None
        return dirs[::-1]

    def history(self, image: str) -> list[dict[str, Any]]:
        """The image's build history, newest step first (each with the instruction that made it)."""
        try:
            return [dict(entry) for entry in self.api.history(image)]
        except docker.errors.APIError as exc:
            raise EngineError(f"history of {image[:19]}: {_short(exc)}") from None

    def tag(self, image: str, ref: str) -> None:
        repo, tag = _split_ref(ref)
        try:
            if not self.api.tag(image, repo, tag, force=True):
                raise EngineError(f"tagging {image[:19]} as {ref} failed")
        except docker.errors.APIError as exc:
            raise EngineError(f"tag {ref}: {_short(exc)}") from None

    def untag(self, ref: str) -> None:
        with suppress(docker.errors.APIError):
            self.api.remove_image(ref, noprune=True)

    def remove_image(self, ref: str) -> None:
        with suppress(docker.errors.APIError):
            self.api.remove_image(ref, force=True)

    def push(self, ref: str, sink: LineSink | None = None, *, attempts: int = 4, wait_max: float = 30.0,
             auth: tuple[str, str] | None = None) -> str:
        """Push one reference; returns the manifest digest the registry reported. Transient failures
        (connection reset/refused, timeouts, 5xx) are retried with exponential backoff; others are not."""
        def notice(state: tenacity.RetryCallState) -> None:
            if sink is not None:
                why = state.outcome.exception() if state.outcome else ""
                sink(f"retrying push {ref} (attempt {state.attempt_number + 1} of {attempts}) after: {why}")

        retrying = tenacity.Retrying(
            retry=tenacity.retry_if_exception(lambda exc: isinstance(exc, EngineError) and transient(exc.message)),
            stop=tenacity.stop_after_attempt(attempts),
            wait=tenacity.wait_exponential(multiplier=1, min=1, max=wait_max),
            before_sleep=notice,
            reraise=True,
        )
        return str(retrying(self._push_once, ref, None, auth))

    def _push_once(self, ref: str, sink: LineSink | None, auth: tuple[str, str] | None = None) -> str:
        repo, tag = _split_ref(ref)
        try:
            stream = self.api.push(repo, tag=tag, stream=True, decode=True, auth_config=_auth_config(auth))
            records = _drain(stream, sink, f"push {ref}")
        except docker.errors.APIError as exc:
            raise EngineError(_untrusted(ref, f"push {ref}: {_short(exc)}")) from None
        except EngineError as exc:
            raise EngineError(_untrusted(ref, exc.message)) from None
        except requests.exceptions.RequestException as exc:
            raise EngineError(f"push {ref}: {_short(exc)}") from None
        for rec in records:
            aux = rec.get("aux")
            if isinstance(aux, dict) and "Digest" in aux:
                return str(aux["Digest"])
        raise EngineError(f"push {ref}: the registry reported no digest")

    def registry_digest(self, ref: str) -> str:
        """The manifest digest the registry holds for a reference (asked through the engine)."""
        try:
            info = self.api.inspect_distribution(ref)
        except docker.errors.APIError as exc:
            raise EngineError(f"registry lookup {ref}: {_short(exc)}") from None
        return str(info["Descriptor"]["digest"])

    # -- containers -------------------------------------------------------------------------
    @contextmanager
    def container(self, image: str, command: list[str], **options: Any) -> Iterator[str]:
        """Create a container and always remove it, whatever happens inside the block."""
        host_config = self.api.create_host_config(**options.pop("host_config", {}))
        labels = {MANAGED_LABEL: "1", **self.run_labels, **options.pop("labels", {})}
        with self.containers.lock:  # created and recorded at once, never after close_containers
            if self.containers.closed:
                raise EngineError("the run is stopping: no new container is started")
            try:
                cid = str(self.api.create_container(image, command, host_config=host_config, labels=labels,
                                                    **options)["Id"])
            except docker.errors.APIError as exc:
                raise EngineError(f"create container from {image[:19]}: {_short(exc)}") from None
            self.containers.ids.add(cid)
        try:
            yield cid
        finally:
            with suppress(docker.errors.APIError, requests.exceptions.RequestException):
                self.api.remove_container(cid, force=True, v=True)
            with self.containers.lock:
                self.containers.ids.discard(cid)

    def run(self, image: str, command: list[str], *, files: Mapping[str, bytes] | None = None,
            fetch: tuple[str, ...] = (), timeout: float = 600, env: Mapping[str, str] | None = None,
            host_config: Mapping[str, Any] | None = None, user: str | None = None,
            sink: LineSink | None = None) -> RunResult:
        """Run a command in a fresh container: copy `files` in, wait (killing it after `timeout`),
        collect logs and the `fetch` paths, and remove the container."""
        start = time.monotonic()
        # One-shot commands: an image's HEALTHCHECK (a server's) means nothing in them, so it is off.
        opts: dict[str, Any] = {"host_config": dict(host_config or {}), "environment": dict(env or {}),
                                "healthcheck": {"test": ["NONE"]}}
        if user:
            opts["user"] = user
        try:
            with self.container(image, command, **opts) as cid:
                return self._run_in(cid, files, fetch, timeout, sink, start)
        except docker.errors.APIError as exc:
            raise EngineError(f"run in {image[:19]}: {_short(exc)}") from None

    def _run_in(self, cid: str, files: Mapping[str, bytes] | None, fetch: tuple[str, ...], timeout: float,
                sink: LineSink | None, start: float) -> RunResult:
        if files:
            self.api.put_archive(cid, "/", _tar(files))
        self.api.start(cid)
        follower = None
        if sink is not None:
            follower = threading.Thread(target=self._follow, args=(cid, sink), daemon=True)
            follower.start()
        exit_code: int | None
        try:
            exit_code = int(self.api.wait(cid, timeout=max(1.0, timeout))["StatusCode"])
        except (requests.exceptions.ReadTimeout, requests.exceptions.ConnectionError):
            exit_code = None
            with suppress(docker.errors.APIError):
                self.api.kill(cid)
        if follower is not None:
            follower.join(timeout=10)
        logs = self.api.logs(cid, stdout=True, stderr=True).decode(errors="replace")
        got: dict[str, bytes] = {}
        for path in fetch:
            try:
                stream, _ = self.api.get_archive(cid, path)
                got[path] = _untar_one(b"".join(stream))
            except docker.errors.APIError:
                pass
        return RunResult(exit_code, logs, got, time.monotonic() - start)

    def _follow(self, cid: str, sink: LineSink) -> None:
        try:
            for chunk in self.api.logs(cid, stream=True, follow=True):
                for line in chunk.decode(errors="replace").splitlines():
                    sink(line)
        except (docker.errors.APIError, requests.exceptions.RequestException):
            pass

    def has_nvidia_runtime(self) -> bool:
        """Whether the engine has the NVIDIA container toolkit's runtime (so `--gpus all` works)."""
        try:
            return "nvidia" in (self.api.info().get("Runtimes") or {})
        except docker.errors.APIError:
            return False

    def managed_containers(self, label: str = MANAGED_LABEL) -> list[str]:
        return [c["Id"] for c in self.api.containers(all=True, filters={"label": label})]

    def remove_containers(self, label: str) -> int:
        """Force-remove every container carrying a label (`key=value`); returns how many."""
        removed = 0
        with suppress(docker.errors.APIError, requests.exceptions.RequestException):
            for cid in self.managed_containers(label):
                with suppress(docker.errors.APIError):
                    self.api.remove_container(cid, force=True, v=True)
                    removed += 1
        return removed

    def prune_volumes(self, prefix: str) -> int:
        """Remove the volumes named `prefix` + an image ID (its hex) whose image is no longer on this engine and that
        no container uses (a smoke run's compile cache, once its image is gone): how many were removed."""
        removed = 0
        try:
            found = (self.api.volumes(filters={"name": prefix}) or {}).get("Volumes") or []
        except docker.errors.APIError:
            return 0
        for volume in found:
            name = str(volume.get("Name") or "")
            image = name[len(prefix):]
            if not name.startswith(prefix) or not re.fullmatch(r"[0-9a-f]{64}", image):  # (not one of ours)
                continue
            try:
                if self.image_id("sha256:" + image) is not None:
                    continue
                self.api.remove_volume(name)
            except (docker.errors.APIError, EngineError):  # in use (a run of its image has it), just removed by
                continue  # another run, or the engine would not say: kept, and the run goes on
            removed += 1
        return removed


_TRANSIENT = re.compile(
    r"connection (reset|refused|aborted)|broken pipe|timed? ?out|timeout|temporar|unexpected eof|\beof\b|"
    r"\b50[0234]\b|bad gateway|service unavailable|gateway time|too many requests|\b429\b|i/o timeout",
    re.IGNORECASE,
)


def transient(message: str) -> bool:
    """Whether a registry/engine error message describes a failure worth retrying."""
    return bool(_TRANSIENT.search(message))


def _drain(stream: Any, sink: LineSink | None, what: str) -> list[dict[str, Any]]:
    """Read a decoded JSON stream to its end; an error record raises EngineError with its message. Build output
    comes in chunks that need not end a line (a program that writes a line in two writes): the sink gets whole
    lines, a chunk's unfinished end joined to the next."""
    records: list[dict[str, Any]] = []
    pending = ""
    try:
        for rec in stream:
            if not isinstance(rec, dict):
                continue
            records.append(rec)
            if "errorDetail" in rec or "error" in rec:
                detail = rec.get("errorDetail") or {}
                message = (detail.get("message") if isinstance(detail, dict) else None) or rec.get("error")
                raise EngineError(f"{what}: {str(message).strip()}")
            if sink is None:
                continue
            if "stream" in rec:
                *lines, pending = (pending + str(rec["stream"])).split("\n")
                if "\r" in pending[:-1]:  # a progress bar's states with no newline yet: only its last is kept
                    pending = pending[pending.rindex("\r", 0, len(pending) - 1) + 1:]
                for line in lines:  # (a progress bar's \r-separated states: its last)
                    if (last := line.rstrip("\r").rsplit("\r", 1)[-1]).strip():
                        sink(last)
            elif "status" in rec and "progressDetail" not in rec:
                sink(" ".join(str(rec.get(k, "")) for k in ("id", "status") if rec.get(k)))
    finally:
        if sink is not None and (last := pending.rstrip("\r").rsplit("\r", 1)[-1]).strip():
            sink(last)
    return records


def _untrusted(ref: str, message: str) -> str:
    """An engine's pull or push error, with what to do where the engine did not trust the registry's certificate
    (imagebuilder's own requests may trust it through --registry-ca; the engine reads only its certs.d)."""
    if "x509:" not in message and "certificate signed by unknown authority" not in message:
        return message
    host = parse(ref).host
    return f"{message}; the engine does not trust {host}'s certificate: put its CA in {CERTS_D / host}/ca.crt on " \
           "the engine's host"


def _auth_config(auth: tuple[str, str] | None) -> dict[str, str] | None:
    """Credentials for one push or pull (None: the engine uses the Docker config docker-py read)."""
    return None if auth is None else {"username": auth[0], "password": auth[1]}


def _split_ref(ref: str) -> tuple[str, str | None]:
    """(repository, tag) as docker-py's pull, push and tag take them; a reference by digest is whole."""
    parsed = parse(ref)
    return (ref, None) if parsed.digest else (parsed.name, parsed.tag or "latest")


def _tar(files: Mapping[str, bytes]) -> bytes:
    """The files as a tar for put_archive. The folder holding each file is writable by anyone, sticky like
    /tmp, so an image's non-root user can write its results beside them."""
    holders = {"/".join(path.strip("/").split("/")[:-1]) for path in files}
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        dirs: set[str] = set()
        for path, data in sorted(files.items()):
            parts = path.strip("/").split("/")
            for i in range(1, len(parts)):
                d = "/".join(parts[:i])
                if d not in dirs:
                    dirs.add(d)
                    info = tarfile.TarInfo(d)
                    info.type = tarfile.DIRTYPE
                    info.mode = 0o1777 if d in holders else 0o755
                    tar.addfile(info)
            info = tarfile.TarInfo(path.strip("/"))
            info.size = len(data)
            info.mode = 0o755 if path.endswith(".sh") else 0o644
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _untar_one(data: bytes) -> bytes:
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        for member in tar.getmembers():
            if member.isfile():
                f = tar.extractfile(member)
                if f is not None:
                    return f.read()
    return b""


def _local(api: docker.APIClient) -> docker.APIClient:
    """The client, told not to read the environment's proxies and ~/.netrc on each request when it talks to the
    engine over a Unix socket (requests does both per request, ~1 ms each, for a connection neither applies to:
    hundreds of calls in a run). A TCP engine keeps them, as the docker CLI does."""
    if str(getattr(api, "base_url", "")).startswith("http+docker://"):
        api.trust_env = False
    return api


def _short(exc: BaseException) -> str:
    text = getattr(exc, "explanation", None) or str(exc)
    with suppress(ValueError, AttributeError):
        text = json.loads(text).get("message", text)
    return " ".join(str(text).split())[:300]


def _folder_files(folder: str) -> Iterator[tuple[str, int, BinaryIO]]:
    """The regular files under one layer's folder (overlay2 `diff`), as paths in the image, in os.walk's order
    (a folder's files, then its folders). Each file is opened on its first read: a scan reads few of them (a
    torch layer holds ~27,000 files, of which a shapes-only scan reads ~3,500), and skips the rest by path and
    size."""
    pending = [(folder, "")]
    while pending:
        real, inside = pending.pop()
        try:
            with os.scandir(real) as listing:
                entries = list(listing)
        except OSError:
            continue
        folders = []
        for entry in entries:
            path = f"{inside}/{entry.name}"
            try:
                if entry.is_dir(follow_symlinks=False):
                    folders.append((entry.path, path))
                    continue
                if not entry.is_file(follow_symlinks=False):
                    continue  # links, and the character devices that are overlay whiteouts
                size = entry.stat(follow_symlinks=False).st_size
            except OSError:
                continue
            stream = _FileOnRead(entry.path)
            try:
                yield path, size, cast(BinaryIO, stream)
            finally:
                stream.close()
        pending.extend(reversed(folders))


class _FileOnRead(io.RawIOBase):
    """A file opened on its first read; one that cannot be opened any more reads as empty (as before: skipped)."""

    opener = io.FileIO

    def __init__(self, path: str) -> None:
        self.path = path
        self.file: io.FileIO | None = None
        self.gone = False

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        if self.file is None and not self.gone:
            try:
                self.file = self.opener(self.path, "rb")
            except OSError:
                self.gone = True
        return 0 if self.file is None else int(self.file.readinto(buffer) or 0)

    def close(self) -> None:
        if self.file is not None:
            self.file.close()
        super().close()


class _ChunkReader(io.RawIOBase):
    """A readable file over an iterator of byte chunks (an image export streamed by the engine)."""

    def __init__(self, chunks: Iterator[bytes]) -> None:
        self.chunks = iter(chunks)
        self.rest = b""

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        while not self.rest:
            try:
                self.rest = next(self.chunks)
            except StopIteration:
                return 0
        n = min(len(buffer), len(self.rest))
        buffer[:n] = self.rest[:n]
        self.rest = self.rest[n:]
        return n


class NoEngine:
    """No container engine: a Kubernetes pod's judge, which reads a suite another container ran. Nothing is on it
    (no image, no GPU runtime); whatever would need an engine is refused, naming what asked."""

    def __init__(self, why: str) -> None:
        self.why = why  # said in every refusal
        self.run_labels: dict[str, str] = {}

    def refuse(self, what: str) -> EngineError:
        return EngineError(f"{what} needs a container engine; {self.why}")

    def clone(self) -> NoEngine:
        return self

    def image_id(self, ref: str) -> str | None:
        return None

    def inspect(self, ref: str) -> dict[str, Any]:
        raise self.refuse(f"inspecting {ref}")

    def images_with_label(self, label: str, *, every: bool = False) -> list[dict[str, Any]]:
        return []

    def history(self, image: str) -> list[dict[str, Any]]:
        raise self.refuse(f"the history of {image}")

    def layer_files(self, image: str, top: int) -> Iterator[tuple[str, int, BinaryIO]]:
        raise self.refuse(f"reading the layers of {image}")

    def layer_folders(self, image: str) -> list[str] | None:
        return None

    def insecure_registries(self) -> tuple[str, ...]:
        return ()

    def storage(self) -> tuple[str, int | None]:
        return "none", None

    def has_nvidia_runtime(self) -> bool:
        return False

    def build(self, context: bytes, *, network: str, sink: LineSink, nocache: bool = False,
              buildargs: Mapping[str, str] | None = None) -> str:
        raise self.refuse("a build")

    def pull(self, ref: str, sink: LineSink | None = None, *, auth: tuple[str, str] | None = None) -> str:
        raise self.refuse(f"pulling {ref}")

    def push(self, ref: str, sink: LineSink | None = None, *, auth: tuple[str, str] | None = None) -> str:
        raise self.refuse(f"pushing {ref}")

    def tag(self, image: str, ref: str) -> None:
        raise self.refuse(f"tagging {image}")

    def remove_image(self, ref: str) -> None:
        raise self.refuse(f"removing {ref}")

    def run(self, image: str, command: list[str], *, files: Mapping[str, bytes] | None = None,
            fetch: tuple[str, ...] = (), timeout: float = 600, env: Mapping[str, str] | None = None,
            host_config: Mapping[str, Any] | None = None, user: str | None = None,
            sink: LineSink | None = None) -> RunResult:
        raise self.refuse(f"a container of {image}")

    def close_containers(self) -> int:
        return 0

    def remove_containers(self, label: str) -> int:
        return 0

    def prune_volumes(self, prefix: str) -> int:
        return 0
