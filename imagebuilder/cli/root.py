"""The `imagebuilder` group: its global options become the invocation's `Context`. Each command module adds its
commands to `cli`."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import click

from ..declarations.schema import MAX_ENTRIES
from ..errors import InputError
from .context import Context, default_cache_dir
from .options import Paths, TrustedKey, ca_problem, checked, writable_folder


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--engine", "engine_url", envvar="DOCKER_HOST", help="Docker engine URL (default: DOCKER_HOST or "
              "the local socket).")
@click.option("--compat", "compat_file", type=click.Path(path_type=Path), envvar="IMAGEBUILDER_COMPAT",
              help="A compatibility table to use instead of the packaged one (see `compat refresh --out`).")
@click.option("--offline", is_flag=True, envvar="IMAGEBUILDER_OFFLINE",
              help="Do not ask package indexes whether nccl/cudnn overrides exist.")
@click.option("--cache-dir", type=click.Path(path_type=Path), envvar="IMAGEBUILDER_CACHE_DIR",
              callback=writable_folder,
              help="Where pass records are mirrored, by image ID, and build locks kept (default: "
                   "$XDG_CACHE_HOME/imagebuilder, else ~/.cache/imagebuilder).")
@click.option("--trust-key", "trust_keys", multiple=True, type=TrustedKey(), metavar="[ROLE,...=]FILE",
              envvar="IMAGEBUILDER_TRUST_KEYS",
              help="A public key (PEM, Ed25519) whose signed evidence counts, for the roles named before '=' (build: "
                   "build records; gpu: passes on GPUs; cpu: passes without GPUs; publish: SBOMs, VSAs, untested "
                   "records), e.g. gpu=keys/gpu.pub; a key named without roles counts for every role. Repeatable, "
                   "or a list separated by spaces or ':' in IMAGEBUILDER_TRUST_KEYS. Once keys are named for passes "
                   "(or builds), exactly those and the run's own signing key count for them; where none is, this "
                   "machine's own key (made on first use in the cache folder) signs and counts.")
@click.option("--trust-build-key", "trust_build_keys", multiple=True, type=Paths(path_type=Path),
              metavar="FILE", envvar="IMAGEBUILDER_TRUST_BUILD_KEYS",
              help="A public key whose signed build records count (the role build only): an image under a key tag "
                   "is built on, tested, published and promoted only when such a key vouches for it; repeatable, or "
                   "a list separated by spaces or ':' in IMAGEBUILDER_TRUST_BUILD_KEYS. Stage jobs sign with "
                   "IMAGEBUILDER_BUILD_KEY.")
@click.option("--container-label", "container_labels", multiple=True, metavar="KEY=VALUE",
              envvar="IMAGEBUILDER_CONTAINER_LABELS",
              help="A label for every container this command starts (e.g. a CI job's id, to find and remove "
                   "what it left); repeatable, or space-separated in IMAGEBUILDER_CONTAINER_LABELS.")
@click.option("--max-entries", type=click.IntRange(1), default=MAX_ENTRIES, show_default=True,
              envvar="IMAGEBUILDER_MAX_ENTRIES", help="The most entries a matrix may make; a larger one is refused "
              "before any entry is made (planning 10 000 takes about 10 s: benchmarks/results/plan_scale.json).")
@click.option("--registry-ca", "registry_cas", multiple=True, type=Paths(path_type=Path), metavar="FILE",
              envvar="IMAGEBUILDER_REGISTRY_CA", callback=checked(ca_problem),
              help="CA certificates (PEM) a registry's TLS certificate may chain to, besides the system's and "
                   "/etc/docker/certs.d/HOST/*.crt (which the engine reads too); repeatable, or space-separated in "
                   "IMAGEBUILDER_REGISTRY_CA (spaces or ':').")
@click.option("--base-image-id", "base_ids", multiple=True, metavar="IMAGE=sha256:ID",
              envvar="IMAGEBUILDER_BASE_IMAGE_IDS",
              help="A base image's ID as a machine with an engine resolved it, for a command without one (a verify "
                   "pod's judge): the roots' keys start from it. Where there is an engine, it resolves its bases "
                   "itself and this is not read. Repeatable, or space-separated in IMAGEBUILDER_BASE_IMAGE_IDS.")
@click.pass_context
def cli(click_ctx: click.Context, engine_url: str | None, compat_file: Path | None, offline: bool,
        cache_dir: Path | None, trust_keys: tuple[str, ...], trust_build_keys: tuple[Path, ...],
        container_labels: tuple[str, ...],
        max_entries: int, registry_cas: tuple[Path, ...], base_ids: tuple[str, ...]) -> None:
    """Build, smoke-test and publish layered PyTorch/CUDA images from a version matrix."""
    from rich.console import Console

    wide = None if sys.stdout.isatty() else 160  # logs and CI: wide enough for the summary table
    labels = []
    for item in container_labels:
        key, sep, value = item.partition("=")
        if not sep or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}", key) or "\n" in value:
            raise InputError(f"--container-label {item!r}: expected KEY=VALUE (KEY of letters, digits, '.', '_', "
                             "'-')")
        labels.append((key, value))
    given = []
    for item in base_ids:
        image, sep, image_id = item.rpartition("=")
        if not sep or not image or not re.fullmatch(r"sha256:[0-9a-f]{64}", image_id):
            raise InputError(f"--base-image-id {item!r}: expected IMAGE=sha256:<64 hex> (the base image's ID)")
        given.append((image, image_id))
    click_ctx.obj = Context(out=Console(width=wide), err=Console(stderr=True), engine_url=engine_url,
                            compat_file=compat_file, check_index=not offline,
                            cache_dir=cache_dir or default_cache_dir(), container_labels=tuple(labels),
                            trust_keys=trust_keys, trust_build_keys=trust_build_keys, max_entries=max_entries,
                            registry_cas=registry_cas, base_ids=tuple(given))
