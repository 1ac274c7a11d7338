"""`keys public`, `keys new` and `keys trusted`: the keys that sign evidence, and whose evidence counts for which
role."""

from __future__ import annotations

import os
from pathlib import Path

import click

from ..errors import InputError
from .context import Context
from .options import writable_file, writable_folder
from .root import cli


@cli.group("keys")
def keys_group() -> None:
    """The keys that sign evidence (`IMAGEBUILDER_SIGNING_KEY`, `IMAGEBUILDER_BUILD_KEY`, else this machine's own)
    and whose evidence counts, for which roles (`--trust-key [ROLE,...=]FILE`, `--trust-build-key`)."""


@keys_group.command("public")
@click.option("--out", "out_file", type=click.Path(path_type=Path), callback=writable_file,
              help="Write it here (default: print it).")
@click.pass_obj
def keys_public(ctx: Context, out_file: Path | None) -> int:
    """The public key this machine signs pass records with (PEM), for other machines' --trust-key."""
    from rich.markup import escape

    signer = ctx.keys().writer("keys public")
    pem = signer.public.pem()
    if out_file is None:
        click.echo(pem.decode(), nl=False)
    else:
        out_file.write_bytes(pem)
        ctx.err.print(f"wrote {out_file}: {escape(signer.public.label())}", highlight=False)
    return 0


@keys_group.command("new")
@click.argument("folder", type=click.Path(path_type=Path), callback=writable_folder)
@click.pass_obj
def keys_new(ctx: Context, folder: Path) -> int:
    """Make a signing key for CI: FOLDER/signing.pem (private, mode 0600: a secret of the GPU runners only) and
    FOLDER/signing.pub (public: commit it, and name it in --trust-key)."""
    from ..evidence.signing import ROLES, Signer

    private, public = folder / "signing.pem", folder / "signing.pub"
    if private.exists() or public.exists():
        raise InputError(f"{private} or {public} exists already; not overwritten")
    folder.mkdir(parents=True, exist_ok=True)
    signer = Signer.generate(str(private))
    fd = os.open(private, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(signer.private_pem())
    public.write_bytes(signer.public.pem())
    ctx.out.print(f"wrote {private} (keep it secret) and {public}: key {signer.public.keyid[:16]} "
                  f"({signer.public.fingerprint}); name the public half with the roles it signs for where it is "
                  f"read, e.g. --trust-key gpu={public} (roles: {', '.join(ROLES)})", highlight=False, soft_wrap=True)
    return 0


@keys_group.command("trusted")
@click.pass_obj
def keys_trusted(ctx: Context) -> int:
    """Each role (build, gpu, cpu, publish) and the keys whose signatures count for it here, and the keys this
    run would sign with: what the global --trust-key / --trust-build-key options (and the environment) make."""
    keys = ctx.keys()
    ctx.out.print(keys.said(), highlight=False, soft_wrap=True)
    for line in keys.roles_said():
        ctx.out.print(f"  {line}", highlight=False, soft_wrap=True)
    ctx.out.print(f"  builds signed with: {keys.builder.public.label() if keys.builder else 'nothing'}",
                  highlight=False, soft_wrap=True)
    return 0
