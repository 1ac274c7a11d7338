"""What one invocation shares (`Context`: consoles, the engine, the compatibility table, keys, registries) and the
two things most commands do first: load the plan, then decide it against the engine and the registry."""

from __future__ import annotations

import contextlib
import dataclasses
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..declarations.schema import MAX_ENTRIES
from ..errors import EngineUnavailable, InputError

if TYPE_CHECKING:  # the rest is imported where it is used: `--help` loads none of it (issue 52)
    from rich.console import Console

    from ..evidence.signing import Keys
    from ..input.compat import CompatTable
    from ..input.matrix import Matrix
    from ..plan.plan import Plan
    from ..plan.render import Renderer
    from ..ports import Engine
    from ..ports.engine import DockerEngine
    from ..ports.registry import Registries, Registry
    from ..ports.resolver import Resolver
    from ..ports.tls import RegistryTrust


def default_cache_dir() -> Path:
    """Where pass records are mirrored and build locks are kept, unless --cache-dir says otherwise."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "imagebuilder"


@dataclass
class Context:
    """Shared state of one invocation: consoles and a lazily connected engine."""

    out: Console
    err: Console
    engine_url: str | None = None
    compat_file: Path | None = None
    check_index: bool = True
    cache_dir: Path = dataclasses.field(default_factory=default_cache_dir)
    container_labels: tuple[tuple[str, str], ...] = ()  # put on every container a command starts
    trust_keys: tuple[str, ...] = ()  # public keys whose signed evidence counts, as named: FILE or ROLE[,ROLE]=FILE
    trust_build_keys: tuple[Path, ...] = ()  # public keys whose signed build provenance counts
    max_entries: int = MAX_ENTRIES  # a larger matrix is refused before its product is built
    registry_cas: tuple[Path, ...] = ()  # --registry-ca: CAs a registry's TLS certificate may chain to
    registry_hosts: tuple[str, ...] = ()  # the matrix's registry host: where the env's credentials go by default
    base_ids: tuple[tuple[str, str], ...] = ()  # base image -> its image ID, as a machine with an engine resolved it
    _engine: DockerEngine | None = None
    _table: CompatTable | None = None

    def table(self) -> CompatTable:
        if self._table is None:
            from ..input import compat as compat_mod

            path = self.compat_file
            if path is not None and not path.is_file():
                raise InputError(f"compatibility table {path} does not exist")
            try:
                self._table = compat_mod.CompatTable.load(path)
            except (ValueError, KeyError, TypeError) as exc:
                raise InputError(f"compatibility table {path or 'data/compat.json'} is unreadable: {exc}") from None
        return self._table

    @property
    def registry_trust(self) -> RegistryTrust:
        """The CAs of registries' TLS: --registry-ca's, the system's, certs.d's (`ports.tls`)."""
        from ..ports.tls import RegistryTrust

        return RegistryTrust(cafiles=self.registry_cas)

    def global_args(self) -> tuple[str, ...]:
        """The global options that change what a plan is (the compatibility table, whether indexes are asked, the
        entry bound), as a later command of the same plan is given them."""
        return (*(("--offline",) if not self.check_index else ()),
                *(("--compat", str(self.compat_file)) if self.compat_file else ()),
                *(("--max-entries", str(self.max_entries)) if self.max_entries != MAX_ENTRIES else ()))

    def keys(self) -> Keys:
        """Who signs this command's evidence and whose evidence counts (`evidence.signing`)."""
        from ..evidence.signing import Keys

        return Keys.load(self.cache_dir / "keys", os.environ, self.trust_keys, self.trust_build_keys)

    def registry(self, host: str) -> Registry:
        """A registry outside a run (promote, history): plain HTTP where the engine would speak it and the registry
        speaks no TLS; without an engine, loopback registries only."""
        from ..ports.registry import Registry

        insecure: tuple[str, ...] = ()
        with contextlib.suppress(EngineUnavailable):
            insecure = self.engine().insecure_registries()
        return Registry.for_host(host, insecure, self.registry_trust, self.registry_hosts)

    def index_versions(self, index_url: str, project: str) -> list[str] | None:
        from ..input import compat_refresh

        return compat_refresh.project_versions(index_url, project, timeout=20)

    def engine(self) -> DockerEngine:
        if self._engine is None:
            from ..ports.engine import DockerEngine

            self._engine = DockerEngine.connect(self.engine_url)
            if self.container_labels:
                self._engine.run_labels.update(self.container_labels)
        return self._engine

    def resolver(self) -> Resolver:
        """What resolves a pip install for `imagebuilder lock` (`ports/resolver.py`): uv."""
        from ..ports.resolver import UvResolver

        return UvResolver()

    def known_bases(self, engine: Engine) -> dict[str, str]:
        """--base-image-id's IDs, for a command without an engine (an engine resolves its own bases)."""
        from ..ports.engine import NoEngine

        return dict(self.base_ids) if isinstance(engine, NoEngine) else {}

    def base_python(self, image: str) -> str | None:
        from ..input.compat import os_python

        known = os_python(image)
        if known:
            return known
        engine = self.engine()
        if engine.image_id(image) is None:
            return None
        result = engine.run(image, ["sh", "-c", "python3 -c 'import sys;print(\"%d.%d\" % sys.version_info[:2])'"],
                            timeout=60)
        text = result.logs.strip().splitlines()[-1:] if result.exit_code == 0 else []
        return text[0] if text else None


def load_plan(ctx: Context, matrix_file: Path, registry: str | None = None, strict: bool = False,
              only: str | None = None, renderer: Renderer | None = None, *,
              locked: bool = True, wheel_files: bool = True) -> tuple[Matrix, Plan]:
    """The matrix and its plan (`only`: those nodes and their parents). With a lock file beside the matrix, its bases
    are pinned by it (`bases.locked`: a matrix it does not cover is an input error); `locked=False`: as if there were
    none (`imagebuilder lock`, which writes it); `wheel_files=False`: a locked wheelhouse's pins taken as the lock
    gives them, its files unread (`outdated`, which compares them instead of refusing a change). The lock covers the
    whole matrix whatever `only` selects; the files hashed are those of the wheelhouses the selected nodes take: a
    file that moved under other entries stops nothing here."""
    from ..input import lock as lock_mod
    from ..input import lookups
    from ..input import matrix as matrix_mod
    from ..plan import pinned

    def load(facts: lookups.Facts | None) -> Matrix:
        return matrix_mod.load(matrix_file, ctx.table(), registry=registry, strict=strict,
                               max_entries=ctx.max_entries, facts=facts)

    matrix = load(None)  # reads only
    if matrix.registry:  # (the environment's registry credentials are for its host, `ports.credentials`)
        ctx.registry_hosts = (matrix.registry.split("/", 1)[0],)
    if matrix.questions:  # the engine and the indexes, asked what the file needs, then read again
        matrix = load(lookups.answer(matrix.questions, base_python=ctx.base_python,
                                     index_versions=ctx.index_versions if ctx.check_index else None))
    for warning in matrix.warnings:
        ctx.err.print(f"[yellow]warning:[/] {warning}", highlight=False)
    lock = lock_mod.read(lock_mod.beside(matrix_file)) if locked else None
    return matrix, pinned.make(matrix, lock, renderer, check=wheel_files, only=only).only(only)


def decide(ctx: Context, plan: Plan, *, rebuild: bool = False, builds: bool = True,
           engine: Engine | None = None) -> tuple[Plan, Registries]:
    """Keys for every node (base images as `plan.bases` resolved them: the lock beside the matrix, else the engine;
    with no engine, as `--base-image-id` names them), then what each node needs: the cache is looked up locally
    and in the registry. A key tag's image counts only when a trusted build key vouches for it (`provenance`): a
    run that `builds` builds on it, else builds the node again; verify and publish take each node as its vouched
    key tag names it, whatever this engine holds (they test, or publish, exactly that digest).
    A key tag whose build record a key not trusted here signed stops a run that builds before anything builds,
    naming the key and what to trust (building it anew could never be published: its tags name that image)."""
    from rich.markup import escape

    from ..evidence.provenance import BuildTrust
    from ..plan import bases
    from ..plan import cache as cache_mod
    from ..ports.registry import Registries

    engine = engine or ctx.engine()
    plan = bases.keyed(plan if plan.bases else bases.resolve(plan, engine, known=ctx.known_bases(engine)))
    registries = Registries.of_engine(engine.insecure_registries, ctx.registry_trust, scope=ctx.registry_hosts)
    # a lookup's retries are said on stderr (once a run starts, its log says them)
    registries.on_retry = lambda line: ctx.err.print(f"[yellow]  {escape(line)}[/]", highlight=False)
    trust = BuildTrust(ctx.keys().build_trust)
    cache = cache_mod.Cache(engine, registries, trust, staged=not builds)
    plan = cache_mod.decide(plan, cache, rebuild=rebuild)
    for warning in cache.warnings:
        ctx.err.print(f"[yellow]warning:[/] {escape(warning)}", highlight=False)
    if builds and trust.foreign:
        raise InputError(f"{len(trust.foreign)} key tag(s) in the registry are vouched for by a build key this run "
                         f"does not trust (first: {trust.foreign[0]}); building them anew here could not be "
                         "published (their tags name those images)",
                         hint="if that is your stage machine's key, name its public half with --trust-build-key "
                              "(or --trust-key build=FILE); `--no-cache` builds and pushes over them anyway")
    return plan, registries
