"""A node's key tag (`cache-<key12>`): the one image of a key, pushed with its build record beside it (signed
provenance naming the parent it was built on), and never moved off an image a trusted build record vouches for.
Stage pushes key tags; publish pushes those a run staged without them."""

from __future__ import annotations

import time

from rich.markup import escape

from ..errors import EngineError, ImageBuilderError, Refused
from ..evidence import beside, provenance, ruling
from ..evidence.provenance import Build, RegistryBuilds
from ..ledger import PublishStatus
from ..plan.keys import cache_ref
from ..plan.plan import Node
from ..ports.reference import parse
from .context import RunContext


def built_on(run: RunContext, node: Node) -> str | None:
    """The image ID the node's image was built FROM in this run: its build's parent, else its parent node's image
    (a cached image is reused only on that one: `cache.lookup`), else its base image's as the plan resolved it (the
    lock's, else the engine's image of its name: `plan.bases`)."""
    record = run.ledger[node.id]
    if record.parent_image:
        return record.parent_image
    if node.parent is not None:
        return run.ledger[node.parent].image
    base = run.plan.base(node.base_image)
    return base.id if base is not None else None


def unvouched(run: RunContext, node: Node, digest: str, parent_digest: str | None = None) -> str | None:
    """Why the image `digest` under the node's key tag may not be tested, published or credited: no build record
    signed by a key trusted for builds names it as this node's key's image (its config digest), built on the image
    its parent's key tag names (`ruling.provenance`, the judge's rule); None when one does. `parent_digest`: the
    parent's digest as the caller holds it (else what the ledger says)."""
    host, repo, _ = run.key_tag(node)
    parent = None
    if node.parent is not None:
        held = parent_digest or run.ledger[node.parent].digest
        parent = run.passes(host).config_digest(repo, held) if held else run.ledger[node.parent].image
        if parent is None:  # (never "not asked" for a node with a parent: fail closed)
            return f"the image its parent {node.parent} is could not be read, so what it was built on is unknown"
    found = beside.read(run.registries(host), repo, digest, run.keys.build_trust, records=False)
    return ruling.provenance(found, ruling.Ask(key=node.key, parent=parent))


def vouch(run: RunContext, node: Node, repo: str, digest: str, builds: RegistryBuilds) -> None:
    """Build provenance beside the digest this run pushed (or found) under the node's key tag, signed with the
    run's build key: what lets another machine build on it (`cache.lookup`). One that counts already is kept."""
    record = run.ledger[node.id]
    parent = built_on(run, node)
    if record.image is None or parent is None:
        return
    if builds.check(repo, digest, key=node.key, config=record.image, parent=parent) is None:
        return
    if builds.signer is None:
        run.logs.say(f"[yellow]  {escape(node.id)}: no build key (IMAGEBUILDER_BUILD_KEY), so no build record beside "
                     f"{digest[:19]}: other machines build it again rather than on it[/]")
        return
    builds.put(repo, digest, Build(node.id, node.key, record.image, parent, node.base_image or str(node.parent),
                                   dict(node.inputs), provenance.now()))


def published_image(run: RunContext, node: Node, held: tuple[str, str | None] | None = None) -> tuple[str, str] | None:
    """(digest, image ID) under the node's key tag when a trusted build record vouches for it as this key's image
    built on the parent this run uses, and it is not the image this run holds: the key's one image, which this
    run's rebuild does not replace. None otherwise (no key tag, or one nothing vouches for, or this very image).
    `held`: the key tag's digest and config as the caller just read them (else they are read here)."""
    ref = cache_ref(node)
    if held is None and not run.registries.answers(parse(ref).host):
        return None
    client, parsed = run.registries.at(ref)
    if held is None:
        digest = client.manifest_digest(parsed.repository, parsed.reference)
        if digest is None:
            return None
        held = digest, run.passes(parsed.host).config_digest(parsed.repository, digest)
    held_digest, config = held
    if config is None or config == run.ledger[node.id].image:
        return None
    builds = RegistryBuilds(client, run.keys.build_trust)
    if builds.check(parsed.repository, held_digest, key=node.key, config=config,
                    parent=built_on(run, node)) is not None:
        return None
    return held_digest, config


def keep_published(run: RunContext, node: Node, held: tuple[str, str | None] | None = None) -> str | None:
    """A rebuild (`--no-cache`) of a key whose one image is already vouched for: said plainly, and the node is
    that image from here on (its tags keep naming it; the rebuild is not pushed). Its digest, or None."""
    kept = published_image(run, node, held)
    if kept is None:
        return None
    digest, config = kept
    image = run.ledger[node.id].image
    run.logs.say(f"[yellow]  {escape(node.id)}: {escape(cache_ref(node))} names {digest} (image {config[:19]}), which "
                 f"a trusted build record vouches for; this run's image {str(image)[:19]} has the same key and parent "
                 "(a rebuild) and is not pushed: the key's tags keep naming "
                 f"{digest} (change an input, or use {{date}} in `tags:`, to publish a new image)[/]")
    run.ledger.update(node.id, image=config if run.images.worker().image_id(config) else None, digest=digest)
    return digest


def push_key_tag(run: RunContext, node: Node) -> str:
    """The node's manifest digest under its key tag, for the image this run holds, with its build record beside it
    (`vouch`). Pushed when the key tag is missing, or names another image no trusted build key vouches for (both
    digests are said). One key names one image: a key tag whose image a trusted build record vouches for keeps
    naming it (a `--no-cache` rebuild of a key already staged is not pushed, and says so), so tags that name it
    stay true. A node this run never pulled is what its key tag named when it was looked up."""
    ref = cache_ref(node)
    client, parsed = run.registries.at(ref)
    record = run.ledger[node.id]
    held = client.manifest_digest(parsed.repository, parsed.reference)
    if record.image is None:
        known = record.digest or held
        if known is None:
            raise EngineError(f"{ref} is gone from the registry and {node.id} is not on this engine")
        return known
    store = run.passes(parsed.host)
    builds = RegistryBuilds(client, run.keys.build_trust, run.keys.builder, run.layouts)
    if held is not None:
        config = store.config_digest(parsed.repository, held)
        if config == record.image:
            vouch(run, node, parsed.repository, held, builds)
            return held
        kept = keep_published(run, node, (held, config))  # (the key tag just read: not read again)
        if kept is not None:
            return kept
        run.logs.say(f"[yellow]  {escape(ref)} names {held} (image {config}), which no trusted build record vouches "
                     f"for as this key's image on this parent, not the image this run holds ({record.image}): pushing "
                     "this run's image over it[/]")
    engine = run.images.worker()
    engine.tag(record.image, ref)
    run.logs.say(f"[bold]▶ push {escape(ref)}[/]")
    digest = engine.push(ref, sink=lambda line: run.logs.say(f"[yellow]  {escape(line)}[/]"),
                         auth=run.registries.auth(ref))
    held = client.manifest_digest(parsed.repository, parsed.reference)
    if held != digest:
        raise EngineError(f"push {ref}: the registry holds {held}, not the pushed {digest}")
    config = store.config_digest(parsed.repository, digest)
    if config != record.image:
        raise Refused(f"push {ref}: {digest} is image {config}, not this run's {record.image}")
    vouch(run, node, parsed.repository, digest, builds)
    return digest


def push_key_tags(run: RunContext, nodes: list[Node], why: str, *, push: bool = True) -> bool:
    """Push each node under its key tag only (no public tag): what a later verify or publish step, or another
    machine, starts from. Without `push` nothing leaves the engine and nothing is tagged."""
    for i, node in enumerate(nodes):
        start = time.monotonic()
        try:
            if push:
                digest = push_key_tag(run, node)
                run.ledger.update(node.id, digest=digest)
                run.logs.say(f"[cyan]● staged {escape(cache_ref(node))}@{digest}[/] [dim]({escape(why)})[/]")
            run.ledger.fail(node.id, why, publish=PublishStatus.STAGED)
        except ImageBuilderError as exc:
            run.ledger.update(node.id, publish=PublishStatus.FAILED, error=exc.message)
            for rest in nodes[i + 1:]:
                run.ledger.update(rest.id, publish=PublishStatus.HELD, error=f"not staged: {node.id} could not be "
                                  "pushed")
            run.logs.say(f"[bold red]✗ stage {escape(node.id)}: {escape(exc.message)}[/]")
            run.logs.say(f"[yellow]{escape(node.entry.id)}: no tag of this entry was applied[/]")
            return False
        finally:
            run.ledger.timed(node.id, "publish", time.monotonic() - start)
    return True
