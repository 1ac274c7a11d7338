"""imagebuilder's JupyterLab defaults (/etc/jupyter, read by every `jupyter lab` / `jupyter server` start).

Secure by default: the server listens on JUPYTER_PORT (8888) for the image's non-root user, and it only
starts with credentials given at run time, never generated and never printed:
  JUPYTER_TOKEN            a token (at least 16 characters)
  JUPYTER_TOKEN_FILE       a file holding the token, e.g. a mounted secret (/run/secrets/jupyter_token)
  JUPYTER_PASSWORD_HASH    a hashed password, from `python -c "from jupyter_server.auth import passwd; print(passwd())"`
"""

import os
import sys

c = get_config()  # type: ignore[name-defined]  # noqa: F821 - provided by Jupyter's config loader

MIN_TOKEN = 16


def _refuse(message: str) -> None:
    sys.stderr.write(f"jupyter: {message}\n")
    sys.stderr.flush()
    os._exit(64)  # not SystemExit: Jupyter's config loader would catch and log it, then start anyway


if os.geteuid() == 0:
    _refuse("refusing to run as root; start the container as the image's user (no --user 0)")

token = os.environ.get("JUPYTER_TOKEN", "")
token_file = os.environ.get("JUPYTER_TOKEN_FILE", "")
if token_file:
    try:
        with open(token_file, encoding="utf-8") as f:
            token = f.read().strip()
    except OSError as exc:
        _refuse(f"JUPYTER_TOKEN_FILE {token_file} cannot be read: {exc.strerror}")
password_hash = os.environ.get("JUPYTER_PASSWORD_HASH", "")
if not token and not password_hash:
    _refuse("no credentials: set JUPYTER_TOKEN, JUPYTER_TOKEN_FILE (a mounted secret) or JUPYTER_PASSWORD_HASH; "
            "JupyterLab does not start open, and does not make up a token")
if token and len(token) < MIN_TOKEN:
    _refuse(f"the token has {len(token)} characters; use at least {MIN_TOKEN} (e.g. `openssl rand -hex 24`)")

c.ServerApp.ip = "0.0.0.0"
c.ServerApp.port = int(os.environ.get("JUPYTER_PORT", "8888"))
c.ServerApp.port_retries = 0  # the published port or nothing
c.ServerApp.open_browser = False
c.ServerApp.allow_root = False
c.ServerApp.root_dir = os.getcwd()
c.IdentityProvider.token = token  # "" with a password hash: password login only, nothing generated
if password_hash:
    c.PasswordIdentityProvider.hashed_password = password_hash
