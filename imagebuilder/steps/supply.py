"""The supply-chain gate of publish: each image's SBOM, and the vulnerability gate on it, before any public tag of
its entry moves.

The SBOM is about the digest publish is about to tag: found beside it in the registry (a trusted signature, this
very digest), else read from that digest's own layers in the registry (the dpkg database and every Python
distribution of every layer: `supply.inventory`), signed and stored beside it (`evidence.sboms`). An image's
contents are its parent's plus its own layers: a node's inventory is computed once per run and every image built
on it starts from it (a layer is read once per machine: `LocalLayers`), and each component says which layer
brought it. The gate (`supply.policy`) judges the document that was signed, against OSV advisories the matrix
names (`vulnerabilities:`), loaded once before anything runs; an entry with a blocking finding on any of its nodes
is not published, and says which advisory, package, version and layer, and what fixes it.
"""

from __future__ import annotations

import datetime
import gzip
import io
import json
import tarfile
import threading
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from rich.markup import escape

from .. import __version__
from ..errors import EngineError, ImageBuilderError, InputError
from ..evidence.sboms import Found, LocalLayers, RegistrySboms, sbom_tag
from ..plan.plan import Node
from ..ports.hashing import Hashing
from ..run.context import RunContext
from ..supply import osv
from ..supply.inventory import Inventory, LayerFacts, read_folder, read_layer
from ..supply.policy import Verdict, installed, judge, no_data, stale, uncovered


@dataclass(frozen=True)
class Sbom:
    """One image's SBOM as this run holds it: the document, where it is, how this run came by it."""

    document: Mapping[str, Any]
    where: str
    source: str  # computed | found | reused (an image of this run already had it)
    signer: str | None = None

    def summary(self) -> dict[str, Any]:
        from ..supply import cyclonedx

        kinds = [c[0] for c in cyclonedx.components_of(self.document)]
        return {"where": self.where, "source": self.source, "signer": self.signer, "format": "CycloneDX "
                f"{self.document.get('specVersion')}", "components": len(kinds), "deb": kinds.count("deb"),
                "python": kinds.count("python")}


@dataclass
class SupplyChain:
    """Publish's collaborator for SBOMs and the vulnerability gate. `today` decides which exceptions expired."""

    today: datetime.date = field(default_factory=lambda: datetime.datetime.now(datetime.timezone.utc).date())
    _advisories: dict[tuple[Path, ...], osv.Advisories] = field(default_factory=dict)
    _held: dict[str, Sbom] = field(default_factory=dict)  # manifest digest -> its SBOM (this run)
    _inventories: dict[str, tuple[Inventory, list[str]]] = field(default_factory=dict)  # digest -> held, diff_ids
    _locks: dict[str, threading.Lock] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self, run: RunContext) -> None:
        """Every entry's vulnerability data loaded (once per set of files) before anything runs: a file that is
        not OSV data, or a matrix that requires data and has none, is an input error now."""
        old: set[str] = set()
        for entry in run.plan.entries():
            settings = entry.vulnerabilities
            advisories = self.advisories(settings.data)
            why = no_data(settings.policy, advisories)
            aged = stale(settings.policy, advisories, self.today)
            if why is None and aged is not None and settings.policy.require_data:
                why = aged  # (data too old to judge with is no data)
            if why is not None:
                raise InputError(f"{entry.id}: {why}", where=entry.where)
            if aged is not None:
                old.add(aged)
        for aged in sorted(old):
            run.logs.say(f"[yellow]warning: {escape(aged)}[/]")
        for data, advisories in self._advisories.items():
            if data:
                run.logs.say(f"[dim]vulnerability data: {escape(advisories.summary())}[/]")

    def advisories(self, data: tuple[Path, ...]) -> osv.Advisories:
        with self._lock:
            if data not in self._advisories:
                self._advisories[data] = osv.Advisories.load_all(data)
            return self._advisories[data]

    def check(self, run: RunContext, nodes: Sequence[Node], digests: Mapping[str, str], *,
              dry_run: bool = False) -> tuple[dict[str, str], dict[str, str]]:
        """The SBOM of each node's digest (found, or made and, unless `dry_run`, signed beside it), then the gate
        on it: the nodes the gate blocks and why, and the nodes whose SBOM could not be made and why."""
        blocked: dict[str, str] = {}
        failed: dict[str, str] = {}
        for node in nodes:
            try:
                sbom = self.sbom(run, node, digests, dry_run=dry_run)
            except ImageBuilderError as exc:
                failed[node.id] = exc.message
                run.logs.say(f"[bold red]  ✗ {escape(node.id)}: its SBOM could not be made: {escape(exc.message)}[/]")
                continue
            verdict = self.judge(run, node, sbom)
            if verdict.blocked:
                blocked[node.id] = verdict.why()
        return blocked, failed

    def judge(self, run: RunContext, node: Node, sbom: Sbom) -> Verdict:
        settings = node.entry.vulnerabilities
        advisories = self.advisories(settings.data)
        looked_up, unchecked = installed(sbom.document)
        unchecked += uncovered(looked_up, advisories)
        unchecked += [line for item in looked_up for line in advisories.unchecked(item.query)]  # (never "none known")
        verdict = judge(looked_up, advisories, settings.policy, self.today)
        run.ledger.update(node.id, vulnerabilities={**verdict.to_json(), "unchecked": unchecked,
                                                    "policy": settings.policy.to_json()})
        for finding in verdict.findings:
            if finding.blocking:
                run.logs.say(f"[bold red]  ✗ {escape(node.id)}: {escape(finding.why())}[/]")
            elif finding.outcome == "allowed":
                run.logs.say(f"[yellow]  {escape(node.id)}: {escape(finding.why())}[/]")
        if not advisories.count:
            run.logs.say(f"[yellow]  {escape(node.id)}: no vulnerability data: nothing was checked "
                         "(vulnerabilities.data)[/]")
        elif not verdict.findings and not unchecked:
            run.logs.say(f"[dim]  {escape(node.id)}: no known vulnerability ({escape(verdict.data)})[/]")
        if advisories.count and unchecked:
            run.logs.say(f"[yellow]  {escape(node.id)}: not checked: {escape('; '.join(unchecked))}[/]")
        return verdict

    def lock(self, name: str) -> threading.Lock:
        with self._lock:
            return self._locks.setdefault(name, threading.Lock())

    def sbom(self, run: RunContext, node: Node, digests: Mapping[str, str], *, dry_run: bool = False) -> Sbom:
        """The SBOM of the node's digest: this run's, the registry's (signed by a trusted key), or made now."""
        digest = digests.get(node.id) or run.ledger[node.id].digest
        if digest is None:
            raise EngineError(f"{node.id} has no digest in the registry: no SBOM")
        with self.lock(f"sbom {digest}"):
            if digest in self._held:
                held = self._held[digest]
                sbom = Sbom(held.document, held.where, "reused", held.signer)
            else:
                sbom = self._held[digest] = self.find_or_make(run, node, digest, digests, dry_run=dry_run)
        run.ledger.update(node.id, sbom=sbom.summary(), digest=digest)  # (what was judged, also when it is blocked)
        return sbom

    def find_or_make(self, run: RunContext, node: Node, digest: str, digests: Mapping[str, str], *,
                     dry_run: bool) -> Sbom:
        host, repo, _ = run.key_tag(node)
        store = RegistrySboms(run.registries(host), run.keys.trust, run.keys.signer, run.ecosystem())
        found: Found = store.lookup(repo, digest)
        where = f"registry {host}/{repo}:{sbom_tag(digest)}"
        if found.sbom is not None:
            run.logs.say(f"[dim]  {escape(node.id)}: SBOM found beside {digest[:19]} (signed by "
                         f"{escape(found.sbom.signer())})[/]")
            return Sbom(found.sbom.document, where, "found", found.sbom.signer())
        if found.rejected is not None:
            run.logs.say(f"[yellow]  {escape(node.id)}: {escape(found.rejected)}; made again[/]")
        inventory = self.inventory(run, node, digest, digests, dry_run=dry_run)[0]
        from ..supply import cyclonedx  # (its library takes a tenth of a second to import: only when one is made)

        document = cyclonedx.document(inventory, image=f"{host}/{repo}", digest=digest, tool_version=__version__)
        if dry_run:
            return Sbom(document, f"would write {where} (--dry-run)", "computed")
        store.put(repo, digest, document, node=node.id)
        signer = run.keys.signer.public.label() if run.keys.signer else "?"
        run.logs.say(f"[dim]  {escape(node.id)}: SBOM of {len(inventory.components)} components signed beside "
                     f"{digest[:19]}[/]")
        return Sbom(document, f"{where} (written by this run)", "computed", signer)

    def inventory(self, run: RunContext, node: Node, digest: str, digests: Mapping[str, str], *,
                  dry_run: bool = False) -> tuple[Inventory, list[str]]:
        """What the image `digest` holds, and its layers' diff_ids: its parent's inventory (this run's, computed
        once) with its own layers read over it; a root image's base-image layers are labelled as the base
        image's."""
        with self.lock(f"inventory {digest}"):
            if digest not in self._inventories:
                self._inventories[digest] = self.read(run, node, digest, digests, dry_run=dry_run)
            return self._inventories[digest]

    def read(self, run: RunContext, node: Node, digest: str, digests: Mapping[str, str], *,
             dry_run: bool) -> tuple[Inventory, list[str]]:
        host, repo, _ = run.key_tag(node)
        client = run.registries(host)
        layers, diff_ids, config = image_layers(client, repo, digest)
        below: list[str] = []
        inventory = Inventory.empty()
        if node.parent is not None:
            parent = run.plan.node(node.parent)
            parent_digest = digests.get(parent.id) or run.ledger[parent.id].digest
            if parent_digest is not None:
                parent_inventory, below = self.inventory(run, parent, parent_digest, digests, dry_run=dry_run)
                if diff_ids[:len(below)] == below:
                    inventory = parent_inventory
                else:
                    below = []  # (not built on it: every layer is read)
        base_layers = self.base_layers(run, node) if node.parent is None else []
        if base_layers and diff_ids[:len(base_layers)] != base_layers:
            base_layers = []
        cache = LocalLayers(run.cache_dir / "sbom", run.keys.trust, None if dry_run else run.keys.signer)
        folders = self.folders(run, config, diff_ids)
        for index in range(len(below), len(diff_ids)):
            label = f"base image {node.base_image}" if index < len(base_layers) else node.layer.name
            facts = self.layer(run, node, cache, (repo, client, layers[index]), diff_ids[index],
                               folders[index] if folders else None)
            inventory = inventory.apply(facts, label, diff_ids[index])
        return inventory, diff_ids

    @staticmethod
    def folders(run: RunContext, image: str, diff_ids: list[str]) -> list[str] | None:
        """The image's layers as folders of this engine's storage, when the engine holds this very image (its ID
        is the manifest's config digest, its layers these diff_ids) on this machine; None otherwise."""
        try:
            engine = run.images.worker()
            if engine.image_id(image) is None or \
                    [str(d) for d in (engine.inspect(image).get("RootFS") or {}).get("Layers") or []] != diff_ids:
                return None
            return engine.layer_folders(image)
        except ImageBuilderError:
            return None  # (the registry's blobs say the same, slower)

    @staticmethod
    def layer(run: RunContext, node: Node, cache: LocalLayers, blob: tuple[str, Any, Mapping[str, Any]],
              diff_id: str, folder: str | None) -> LayerFacts:
        """What one layer holds: as read before (the cache, by diff_id), else from its folder in this engine's
        storage, else from its blob in the registry (streamed, its digest checked)."""
        cached = cache.get(diff_id)
        if cached is not None:
            try:
                return LayerFacts.from_json(cached)
            except (KeyError, TypeError, ValueError):
                pass  # (an older format: read again)
        facts = None
        if folder is not None:
            try:
                facts = read_folder(folder)
            except OSError as exc:  # (a folder it may not read: the registry's blob says the same)
                run.logs.say(f"[yellow]  {escape(node.id)}: layer {diff_id[:19]} not readable in the engine's "
                             f"storage ({escape(str(exc))}); reading its blob[/]")
        if facts is None:
            repo, client, layer = blob
            digest = str(layer["digest"])
            run.logs.say(f"[dim]  {escape(node.id)}: reading layer {digest[:19]} "
                         f"({int(layer.get('size') or 0) / 2**20:.0f} MiB) for its SBOM[/]")
            facts = read_blob(client, repo, layer, diff_id)
        cache.put(diff_id, facts.to_json())
        return facts

    @staticmethod
    def base_layers(run: RunContext, node: Node) -> list[str]:
        """The diff_ids of the base image a root node was built on (the one its stage recorded, else the one this
        engine has under its name: every run has its base images), or none when unknown."""
        image = str((run.ledger[node.id].base or {}).get("id") or node.base_image or "")
        engine = run.images.worker()
        try:
            if not image or engine.image_id(image) is None:
                return []
            info = engine.inspect(image)
        except EngineError:
            return []
        return [str(d) for d in (info.get("RootFS") or {}).get("Layers") or []]


class ImageLayers(NamedTuple):
    """An image manifest's layers as `image_layers` read them from the registry: as many diff_ids as layer
    blobs (else it raised)."""

    layers: list[Mapping[str, Any]]  # the manifest's layer blobs
    diff_ids: list[str]  # their diff_ids (its config's), index for index
    config: str  # the config's digest: the image's ID on an engine


def image_layers(client: Any, repo: str, digest: str) -> ImageLayers:
    """The layer blobs of an image manifest, their diff_ids and its config's digest."""
    body, _ = client.manifest(repo, digest)
    try:
        manifest = json.loads(body)
        layers = list(manifest["layers"])
        image = str(manifest["config"]["digest"])
        config = json.loads(client.blob(repo, image))
        diff_ids = [str(d) for d in config["rootfs"]["diff_ids"]] if layers or "rootfs" in config else []
    except (ValueError, KeyError, TypeError) as exc:
        raise EngineError(f"{repo}@{digest[:19]} is not an image manifest with a config ({exc})") from None
    if len(layers) != len(diff_ids):
        raise EngineError(f"{repo}@{digest[:19]}: {len(layers)} layers but {len(diff_ids)} diff_ids")
    return ImageLayers(layers, diff_ids, image)


LAYER_TYPES = {  # a layer blob's media type -> whether it is gzip-compressed (what else is refused, saying so)
    "application/vnd.docker.image.rootfs.diff.tar.gzip": True,
    "application/vnd.oci.image.layer.v1.tar+gzip": True,
    "application/vnd.oci.image.layer.v1.tar": False,
    "application/vnd.docker.image.rootfs.diff.tar": False,
}


def read_blob(client: Any, repo: str, layer: Mapping[str, Any], diff_id: str) -> LayerFacts:
    """What a layer blob in the registry holds, streamed: its compressed bytes checked against its digest and its
    tar against its diff_id (the facts are kept by diff_id, so a blob must be what its image's config says)."""
    digest, media_type = str(layer.get("digest")), str(layer.get("mediaType") or "")
    if media_type not in LAYER_TYPES:
        raise EngineError(f"{repo}: layer {digest[:19]} is {media_type or 'of no media type'}; imagebuilder reads "
                          "gzip-compressed and plain tar layers (not zstd) for SBOMs")
    what = f"{repo}: layer {digest[:19]}"
    try:
        with client.open_blob(repo, digest) as stream:  # (its digest is checked when it closes)
            tar = Hashing(gzip.GzipFile(fileobj=stream) if LAYER_TYPES[media_type] else stream)
            reader = io.BufferedReader(tar, 1 << 16)
            facts = read_layer(reader)
            while reader.read(1 << 20):
                pass  # (to the end of the tar: all of it hashed)
            tar_digest = tar.rest()
    except (tarfile.TarError, EOFError, zlib.error, OSError) as exc:
        raise EngineError(f"{what} could not be read as a layer ({exc})") from None
    if tar_digest != diff_id:
        raise EngineError(f"{what} is not the layer its image's config names ({diff_id[:19]})")
    return facts
