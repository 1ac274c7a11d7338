"""Secrets (names, values, where they show up, masking) and the per-repository build lock."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from imagebuilder.plan.render import declared
from imagebuilder.run import lock
from imagebuilder.secrets import redact


@pytest.mark.parametrize(("name", "secret"), [
    ("HF_TOKEN", True), ("aws_secret_access_key", True), ("apiKey", True), ("GITHUB_PAT", True),
    ("registry_password", True), ("DB_PASSWD", True), ("cache_key", True), ("AUTH", True),
    ("team", False), ("venv", False), ("KEYRING_PATH", False), ("monkey", False), ("passenger", False),
    ("tokenizer", False), ("PIP_CERT", False),
])
def test_secret_looking_names(name: str, secret: bool) -> None:
    assert redact.looks_secret(name) is secret


def test_known_secrets_come_from_credentials_and_secret_looking_variables() -> None:
    env = {"HF_TOKEN": "hf_abcdefgh", "SHORT_TOKEN": "abc", "HOME": "/root", "PATH": "/usr/bin"}
    found = redact.known_secrets(env, [("the password for registry r:5000", "pw-123456")])
    assert found == {"the password for registry r:5000": "pw-123456", "$HF_TOKEN": "hf_abcdefgh"}


def test_a_secret_is_found_in_history_env_and_labels_by_name_never_by_value() -> None:
    inspect = {"Config": {"Env": ["PATH=/usr/bin", "NOTE=x-hf_abcdefgh-y"],
                          "Labels": {"io.example.note": "hf_abcdefgh"}}}
    history = [{"CreatedBy": "/bin/sh -c echo ok"}, {"CreatedBy": "/bin/sh -c curl -H 'auth: hf_abcdefgh' x"}]
    found = redact.find_in_image(inspect, history, {"$HF_TOKEN": "hf_abcdefgh"})
    assert len(found) == 3
    assert found[0] == "$HF_TOKEN appears in the image's environment (NOTE)"
    assert found[1] == "$HF_TOKEN appears in the image's label io.example.note"
    assert found[2].startswith("$HF_TOKEN appears in the image's history step 1 (/bin/sh -c curl")
    assert not any("hf_abcdefgh" in f for f in found)
    assert redact.find_in_image(inspect, history, {"$OTHER_TOKEN": "zzzzzzzz"}) == []


def test_a_url_with_credentials_is_found_in_history_and_labels_unknown_as_its_secret_may_be() -> None:
    """A token in a URL's query (or a password in its user info) that this host never knew: found by its shape."""
    inspect = {"Config": {"Env": ["PATH=/usr/bin"], "Labels": {
        "io.example.source": "https://files.example.com/w.tgz?X-Amz-Credential=AKIAEXAMPLE&X-Amz-Signature=f00dfeed"}}}
    history = [{"CreatedBy": "/bin/sh -c pip install --index-url https://pypi.example.com/simple?token=s3cr3t-v4l x"},
               {"CreatedBy": "/bin/sh -c pip install --index-url https://pypi.org/simple?page=2 torch"}]
    found = redact.find_in_image(inspect, history, {})
    assert found == ["the image's label io.example.source holds a URL with a credential in its query",
                     "the image's history step 2 holds a URL with a credential in its query"]
    assert redact.find_in_image({"Config": {}}, history[1:], {}) == []


@pytest.mark.parametrize(("url", "name"), [
    ("https://idx.example/simple?token=s3cr3t", "token"), ("https://idx.example/s?accessToken=s3cr3t", "accessToken"),
    ("https://idx.example/s?apiToken=s3cr3t", "apiToken"), ("https://idx.example/simple?token+=s3cr3t", "token"),
    ("https://idx.example/s?sv=2020&sig=abc", "sig"), ("https://idx.example/s?X-Amz-Signature=f00d", "X-Amz-Signature"),
    ("https://idx.example/simple?page=2&monkey=1", None), ("https://[x/simple?a=1", None),
    ("https://idx.example/simple?api_key=", None),  # (no value)
])
def test_a_query_credential_is_named_whatever_its_case(url: str, name: str | None) -> None:
    assert redact.query_credential(url) == name


def test_mask_replaces_every_value_longest_first() -> None:
    secrets = {"a": "pw-123456", "b": "pw-123456-long"}
    assert redact.mask("x pw-123456-long y pw-123456 z", secrets) == "x *** y *** z"
    assert redact.mask("nothing here", {}) == "nothing here"


def test_the_lock_makes_a_second_holder_wait_and_says_who_holds_it(tmp_path: Path) -> None:
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {str(Path(__file__).resolve().parents[2])!r})
        from pathlib import Path
        from imagebuilder.run import lock
        with lock.hold(Path({str(tmp_path)!r}), ["reg/repo"], print):
            print("held", flush=True)
            time.sleep(2)
        """)], stdout=subprocess.PIPE, text=True)
    assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
    said: list[str] = []
    start = time.monotonic()
    with lock.hold(tmp_path, ["reg/repo", "reg/other"], said.append):
        waited = time.monotonic() - start
    holder.wait(timeout=10)
    assert waited > 1.0
    assert len(said) == 1 and said[0].startswith(f"waiting for lock on reg/repo held by PID {holder.pid} on ")
    with lock.hold(tmp_path, ["reg/repo"], said.append):  # free again: taken at once, nothing said
        pass
    assert len(said) == 1


def scan(files: dict[str, bytes], secrets: dict[str, str], **bounds: int) -> redact.LayerScan:
    import io as io_mod

    out = redact.LayerScan(secrets, **bounds)
    for path, data in files.items():
        out.add(path, len(data), io_mod.BytesIO(data))
    return out


def test_the_layer_scan_finds_known_secrets_in_any_file_and_credential_shapes_in_text_files() -> None:
    secret = "pw-" + "z" * 20
    found = scan({
        "/opt/app/blob.bin": b"\0\1" + secret.encode() + b"\0",  # a binary: known secrets still found
        "/opt/app/.env": b"HF_TOKEN=hf_abcdefghijklmnopqrstuvwxyzabcdefghij\n",
        "/root/.netrc": b"machine x login u password hunter22\n",
        "/opt/app/notes.txt": b"token ghp_" + b"a" * 36 + b" and AKIAABCDEFGHIJKLMNOP\n",
        "/opt/app/key.pem": b"-----BEGIN OPENSSH PRIVATE KEY-----\n" + b"b3BlbnNzaC1rZXktdjEAAAAA" * 3 + b"\n",
        "/etc/pip.conf": b"[global]\nindex-url = https://alice:s3cret-pw@mirror.example/simple\n",
        "/opt/app/ok.py": b"PASSWORD_FIELD = 'password'\nurl = 'https://pypi.org/simple'\n",
    }, {"the index password": secret}).findings
    assert found == [
        "the index password appears in the file /opt/app/blob.bin",
        "the file /opt/app/.env holds a Hugging Face token",
        "the file /opt/app/.env holds a value for $HF_TOKEN",
        "the file /root/.netrc holds credentials",
        "the file /opt/app/notes.txt holds a GitHub token",
        "the file /opt/app/notes.txt holds an AWS access key id",
        "the file /opt/app/key.pem holds a private key",
        "the file /etc/pip.conf holds a URL with a password",
    ]
    assert all(secret not in f for f in found)


def test_a_known_secret_across_two_chunks_is_found_and_the_scan_is_bounded() -> None:
    secret = "s3cr3t-value-12345"
    data = b"x" * ((8 << 20) - 5) + secret.encode() + b"y" * 10
    assert scan({"/big": data}, {"$T": secret}).findings == ["$T appears in the file /big"]
    bounded = scan({"/a": b"a" * 100, "/b": secret.encode()}, {"$T": secret}, max_bytes=110)
    assert bounded.findings == [] and bounded.skipped == 1 and "1 over the scan's" in bounded.summary()


def test_build_args_carry_no_secret() -> None:
    secrets = {"the password for index x": "pw-123456", "the run's index proxy token": "tok-abcdef123"}
    text = "FROM x\nARG IMAGEBUILDER_INDEX_URL=https://x.example/simple\nRUN pip install p\n"

    def found(args: dict[str, str], dockerfile: str = text) -> list[str]:
        return redact.find_in_build_args(args, secrets, declared(dockerfile))

    assert found({"IMAGEBUILDER_INDEX_URL": "http://127.0.0.1:2345/simple"}) == []
    assert found({"IMAGEBUILDER_INDEX_URL": "https://u:pw-123456@x.example/simple"}) \
        == ["the password for index x appears in build arg IMAGEBUILDER_INDEX_URL",
            "build arg IMAGEBUILDER_INDEX_URL holds a URL with a password"]
    assert found({"HF_TOKEN": "x"}) == ["build arg HF_TOKEN is named like a secret"]
    # Docker keeps its predefined proxy args out of the history and the cache key, unless the text declares them.
    proxy = {"http_proxy": "http://imagebuilder:tok-abcdef123@127.0.0.1:2345"}
    assert found(proxy) == []
    for declares in ("ARG http_proxy", "arg http_proxy=x", "  ARG A http_proxy", "ARG \\\n  http_proxy"):
        assert found(proxy, f"{text}{declares}\n")[:1] == [
            "the run's index proxy token appears in build arg http_proxy"], declares
    assert found(proxy, f"{text}ARG HTTP_PROXY\n") == []  # another name


def test_the_lock_is_never_opened_through_a_planted_link(tmp_path: Path) -> None:
    """N5-09 (run/lock.py): a link planted under a lock's name in a shared cache folder is refused, and what it
    points at is left as it was."""
    import hashlib

    from imagebuilder.errors import InputError

    victim = tmp_path / "precious.txt"
    victim.write_text("keep me\n")
    folder = tmp_path / "locks"
    folder.mkdir()
    (folder / (hashlib.sha256(b"reg/repo").hexdigest()[:24] + ".lock")).symlink_to(victim)
    with pytest.raises(InputError, match="is a symbolic link"), lock.hold(folder, ["reg/repo"], print):
        pass
    assert victim.read_text() == "keep me\n"
