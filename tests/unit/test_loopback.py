"""What builds reach on loopback: an index that needs credentials, through a proxy that adds them (and sends
them nowhere else), and where those credentials come from."""

from __future__ import annotations

import http.client
import http.server
import json
import os
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from imagebuilder.errors import InputError
from imagebuilder.input import matrix as matrix_mod
from imagebuilder.input.compat import CompatTable
from imagebuilder.plan.render import wheelhouse_port
from imagebuilder.run.loopback import Credentials, Upstream, index_credentials, index_root, serve_indexes
from imagebuilder.secrets.index_auth import plain_http_problem, scope_problem

from ..auth_index import auth_index, basic
from ..conftest import MatrixWriter

AUTH = basic("u", "pw-123456")


def respond(path: str, port: int) -> tuple[int, dict[str, str], bytes]:
    if path == "/elsewhere":
        return 302, {"Location": "https://files.example/p.whl"}, b""
    body = (f'<a href="http://127.0.0.1:{port}/files/p.whl">p</a>'
            '<a href="https://files.example/q.whl">q</a>').encode()
    return 200, {"Content-Type": "text/html"}, body


@pytest.fixture
def upstream() -> Iterator[tuple[str, list[str]]]:
    """An index that answers only with AUTH: (its URL, the Authorization headers it saw)."""
    with auth_index(AUTH, respond) as served:
        yield served


class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any) -> None:
        return None


def test_the_proxy_adds_the_credentials_and_points_the_index_links_back_at_itself(
        upstream: tuple[str, list[str]]) -> None:
    url, seen = upstream
    with pytest.raises(urllib.error.HTTPError):  # the index really needs them
        urllib.request.urlopen(url + "/p/")
    with serve_indexes({url: Credentials("u", "pw-123456", "test")}) as proxied:
        local = proxied.urls[url]
        assert local.startswith("http://127.0.0.1:") and local.endswith("/simple") and "pw-" not in local
        args = proxied.build_args()  # what a build gets: Docker's predefined proxy args, with the run's token
        assert set(args) == {"http_proxy", "HTTP_PROXY"} and proxied.token in args["http_proxy"]
        build = urllib.request.build_opener(urllib.request.ProxyHandler({"http": args["http_proxy"]}), NoRedirect)
        page = build.open(local + "/p/").read().decode()
        origin = local.rsplit("/simple", 1)[0]
        assert f'href="{origin}/files/p.whl"' in page  # its own links go through the proxy
        assert 'href="https://files.example/q.whl"' in page  # others' links stay as they are
        with pytest.raises(urllib.error.HTTPError) as info:
            build.open(origin + "/elsewhere")
        assert info.value.code == 302  # a redirect elsewhere is handed to pip, not followed with credentials
        assert info.value.headers["Location"] == "https://files.example/q.whl".replace("q", "p")
    assert seen[-2:] == [AUTH, AUTH]


def test_the_proxy_serves_only_the_builds_of_its_run(upstream: tuple[str, list[str]]) -> None:
    url, seen = upstream
    with serve_indexes({url: Credentials("u", "pw-123456", "test")}) as proxied, \
            serve_indexes({url: Credentials("u", "pw-123456", "test")}) as other_run:
        local, before = proxied.urls[url], len(seen)
        port = local.split(":")[2].split("/")[0]
        strangers = [urllib.request.build_opener(urllib.request.ProxyHandler({}), NoRedirect),  # straight to it
                     urllib.request.build_opener(urllib.request.ProxyHandler(  # as a proxy, with no token
                         {"http": f"http://127.0.0.1:{port}"}), NoRedirect),
                     urllib.request.build_opener(urllib.request.ProxyHandler(  # with another run's token
                         {"http": other_run.build_args()["http_proxy"].replace(str(other_run.port), port)}),
                         NoRedirect)]
        for opener in strangers:
            with pytest.raises(urllib.error.HTTPError) as info:
                opener.open(local + "/p/")
            assert info.value.code == 407 and info.value.headers["Proxy-Authenticate"] == 'Basic realm="imagebuilder"'
        assert len(seen) == before  # nothing reached the index
        # The run's builds: any other plain-HTTP origin passes through, with no credentials added.
        build = urllib.request.build_opener(urllib.request.ProxyHandler({"http": proxied.build_args()["http_proxy"]}),
                                            NoRedirect)
        with pytest.raises(urllib.error.HTTPError) as info:
            build.open(url + "/p/")  # the index itself, asked by its own address: no credentials, so refused there
        assert info.value.code == 401 and seen[-1] == ""
        conn = http.client.HTTPConnection("127.0.0.1", int(port), timeout=10)  # HTTPS is never proxied (no tunnel)
        conn.request("CONNECT", "files.example:443", headers={"Proxy-Authorization": basic("imagebuilder",
                                                                                           proxied.token)})
        assert conn.getresponse().status == 405
        conn.close()


def test_the_environments_pair_needs_the_hosts_it_is_for() -> None:
    env = {"IMAGEBUILDER_INDEX_USER": "bob", "IMAGEBUILDER_INDEX_PASSWORD": "from-env", "NETRC": "/nonexistent"}
    urls = ["https://pypi.org/simple", "https://download.pytorch.org/whl/cpu", "https://mirror.example/simple"]
    problem = scope_problem(urls, env)
    assert problem is not None and "IMAGEBUILDER_INDEX_HOSTS=mirror.example" in problem and "from-env" not in problem
    assert scope_problem(urls[:2], env) is None  # public indexes only: nothing to send
    assert scope_problem(urls, {**env, "IMAGEBUILDER_INDEX_HOSTS": "mirror.example"}) is None
    assert scope_problem(urls, {"NETRC": "/nonexistent"}) is None


def test_credentials_come_from_netrc_by_host_or_from_the_environment_but_never_for_public_indexes(
        tmp_path: Path) -> None:
    netrc = tmp_path / "netrc"
    netrc.write_text("machine mirror.example login alice password from-netrc\n")
    netrc.chmod(0o600)
    env = {"NETRC": str(netrc), "IMAGEBUILDER_INDEX_USER": "bob", "IMAGEBUILDER_INDEX_PASSWORD": "from-env",
           "IMAGEBUILDER_INDEX_HOSTS": "other.example, ports.example:8443"}
    found = index_credentials("https://mirror.example/simple", env)
    assert found is not None and (found.user, found.password) == ("alice", "from-netrc") and "netrc" in found.source
    other = index_credentials("https://other.example/simple", env)
    assert other is not None and other.password == "from-env" and "from-env" not in other.source
    assert index_credentials("https://ports.example:8443/simple", env) is not None
    assert index_credentials("https://evil.example/simple", env) is None  # a host the pair is not for
    assert index_credentials("https://other.example/simple", {**env, "IMAGEBUILDER_INDEX_HOSTS": ""}) is None
    assert index_credentials("https://pypi.org/simple", env) is None  # never sent to PyPI
    assert index_credentials("https://download.pytorch.org/whl/cpu", env) is None
    assert index_credentials("https://other.example/simple", {"NETRC": str(netrc)}) is None


def test_a_docker_client_config_with_proxies_keeps_working(upstream: tuple[str, list[str]], tmp_path: Path) -> None:
    """docker-py gives builds the config's proxies: its noProxy (without loopback names, or pip would skip this
    run's proxy) goes to the builds, and other origins' plain HTTP goes on through its httpProxy."""
    url, _ = upstream
    seen: list[tuple[str, str]] = []  # (request target, Proxy-Authorization) the corporate proxy got

    class Corporate(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            seen.append((self.path, self.headers.get("Proxy-Authorization", "")))
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, *args: Any) -> None:
            pass

    corporate = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Corporate)
    threading.Thread(target=corporate.serve_forever, daemon=True).start()
    (tmp_path / "config.json").write_text(json.dumps({"proxies": {"default": {
        "httpProxy": f"http://corp:s%40id@127.0.0.1:{corporate.server_address[1]}",
        "noProxy": "localhost,127.0.0.1,.internal.example"}}}))
    config = Upstream.of_config({"DOCKER_CONFIG": str(tmp_path)})
    try:
        with serve_indexes({url: Credentials("u", "pw-123456", "test")}, upstream=config) as proxied:
            args = proxied.build_args()
            assert args["no_proxy"] == args["NO_PROXY"] == ".internal.example"
            build = urllib.request.build_opener(urllib.request.ProxyHandler({"http": args["http_proxy"]}))
            assert build.open("http://deb.debian.example/dists/InRelease").read() == b"ok"
            assert seen == [("http://deb.debian.example/dists/InRelease", basic("corp", "s@id"))]
            assert build.open(proxied.urls[url] + "/p/").status == 200  # the index: never the corporate proxy's
            assert len(seen) == 1
    finally:
        corporate.shutdown()
        corporate.server_close()
    assert Upstream.of_config({"DOCKER_CONFIG": str(tmp_path / "none")}) == Upstream()


def test_the_proxy_lends_the_credentials_only_under_the_index_path(upstream: tuple[str, list[str]]) -> None:
    """N14: an index at /team-a/simple (an Artifactory repository, say) gets its credentials for /team-a/... (its
    pages and files) and for nothing else on its host: another repository's path, or one that climbs out with
    `..` (plain or percent-encoded), is answered 403 and never reaches the host."""
    url, seen = upstream
    index = url.replace("/simple", "/team-a/simple")
    assert index_root("/team-a/simple") == "/team-a/" and index_root("/root/pypi/+simple/") == "/root/pypi/"
    assert index_root("/simple") == "/" and index_root("/pypi/custom") == "/pypi/custom/"
    with serve_indexes({index: Credentials("u", "pw-123456", "test")}) as proxied:
        local = proxied.urls[index]
        origin = local.rsplit("/team-a/simple", 1)[0]
        build = urllib.request.build_opener(urllib.request.ProxyHandler({"http": proxied.build_args()["http_proxy"]}),
                                            NoRedirect)
        assert build.open(local + "/p/").status == 200 and seen[-1] == AUTH
        assert build.open(origin + "/team-a/files/p.whl").status == 200
        before = len(seen)
        for path in ("/team-b/simple/p/", "/admin/", "/team-a/../team-b/simple/", "/team-a/%2e%2e/team-b/",
                     "/team-ab/simple/"):
            with pytest.raises(urllib.error.HTTPError) as info:
                build.open(origin + path)
            assert info.value.code == 403, path
        assert len(seen) == before  # nothing of it reached the index's host


def test_a_wheelhouse_is_served_to_the_runs_builds_only(tmp_path: Path) -> None:
    """Audit N14: any local process could read the wheelhouse during a run. Now it asks for the run's token, as
    the index proxies do; it lists and serves the folder's own files, nothing beside or below them."""
    folder = tmp_path / "wheels"
    folder.mkdir()
    (folder / "torch-2.13.0+cpu-cp311-none-any.whl").write_bytes(b"wheel bytes")
    (folder / "sub").mkdir()
    (folder / "sub" / "hidden.whl").write_bytes(b"no")
    (tmp_path / "elsewhere.whl").write_bytes(b"linked wheel")
    (folder / "link.whl").symlink_to(tmp_path / "elsewhere.whl")  # a link to a wheel counts, as in the node's key
    (folder / "dangling.whl").symlink_to(tmp_path / "gone.whl")
    (tmp_path / "outside.txt").write_text("secret")
    os.close(os.open(bytes(folder) + b"/latin-\xff.whl", os.O_CREAT | os.O_WRONLY))  # not UTF-8: left out, listing kept
    with serve_indexes({}, wheelhouses=[folder]) as served:
        url = served.wheelhouses[folder]
        assert url.startswith("http://127.0.0.1:") and url.endswith("/") and served.token not in url
        with pytest.raises(urllib.error.HTTPError) as info:  # another process on the machine: no token
            urllib.request.urlopen(url)
        assert info.value.code == 407
        args = served.build_args()  # what a build that uses the wheelhouse gets: the run's token, in http_proxy
        assert set(args) == {"http_proxy", "HTTP_PROXY"} and served.token in args["http_proxy"]
        build = urllib.request.build_opener(urllib.request.ProxyHandler({"http": args["http_proxy"]}))
        page = build.open(url).read().decode()
        assert 'href="torch-2.13.0%2Bcpu-cp311-none-any.whl"' in page and 'href="link.whl"' in page
        assert "sub" not in page and "dangling" not in page and "latin" not in page
        assert build.open(url + "torch-2.13.0%2Bcpu-cp311-none-any.whl").read() == b"wheel bytes"
        assert build.open(url + "link.whl").read() == b"linked wheel"
        for path in ("sub/hidden.whl", "dangling.whl", "..%2Foutside.txt", "../outside.txt", "latin-%FF.whl"):
            with pytest.raises(urllib.error.HTTPError) as info:
                build.open(url + path)
            assert info.value.code == 404, path
    with pytest.raises(OSError):  # gone with the run
        urllib.request.urlopen(url, timeout=5)


def test_two_runs_at_once_give_their_builds_one_wheelhouse_url(tmp_path: Path) -> None:
    """The wheelhouse's URL is a build arg, so part of every pip step's cache key: a second run of the same folder
    while the first holds its port (two CI jobs on one machine) gives its builds the same URL, which its own proxy
    answers, with its own token; so the two runs share the engine's build cache."""
    folder = tmp_path / "wheels"
    folder.mkdir()
    (folder / "torch-2.13.0+cpu-cp311-none-any.whl").write_bytes(b"wheel bytes")
    with serve_indexes({}, wheelhouses=[folder]) as first, serve_indexes({}, wheelhouses=[folder]) as second:
        assert first.wheelhouses[folder] == second.wheelhouses[folder] == f"http://127.0.0.1:{wheelhouse_port(folder)}/"
        assert first.port != second.port  # (the port itself is the first run's)
        for run, other in ((first, second), (second, first)):
            build = urllib.request.build_opener(urllib.request.ProxyHandler({"http": run.build_args()["http_proxy"]}))
            wheel = run.wheelhouses[folder] + "torch-2.13.0%2Bcpu-cp311-none-any.whl"
            assert build.open(wheel).read() == b"wheel bytes"
            stranger = urllib.request.build_opener(urllib.request.ProxyHandler(
                {"http": run.build_args()["http_proxy"].replace(run.token, other.token)}))
            with pytest.raises(urllib.error.HTTPError) as info:  # each run's proxy takes its own token only
                stranger.open(run.wheelhouses[folder])
            assert info.value.code == 407


def test_index_credentials_never_cross_a_network_in_clear_text(tmp_path: Path, write_matrix: MatrixWriter,
                                                               header: str, table: CompatTable) -> None:
    """N5-09: an `http://` index off loopback gets no credentials (a matrix that would send them is an input error
    naming the index, before anything builds), unless IMAGEBUILDER_INDEX_PLAIN_HTTP_AUTH=1; loopback keeps them."""
    env = {"NETRC": "/nonexistent", "IMAGEBUILDER_INDEX_USER": "ci", "IMAGEBUILDER_INDEX_PASSWORD": "index-s3cret",
           "IMAGEBUILDER_INDEX_HOSTS": "pypi.corp.example 127.0.0.1:3141"}
    assert index_credentials("http://pypi.corp.example/simple", env) is None
    assert index_credentials("https://pypi.corp.example/simple", env) is not None
    assert index_credentials("http://127.0.0.1:3141/simple", env) is not None  # (this machine: no network crossed)
    allowed = {**env, "IMAGEBUILDER_INDEX_PLAIN_HTTP_AUTH": "1"}
    assert index_credentials("http://pypi.corp.example/simple", allowed) is not None
    problem = plain_http_problem(["http://pypi.corp.example/simple"], env)
    assert problem is not None and "IMAGEBUILDER_INDEX_PLAIN_HTTP_AUTH=1" in problem and "s3cret" not in problem
    assert plain_http_problem(["http://pypi.corp.example/simple"], allowed) is None
    path = write_matrix(header + "build: {pip_index_url: 'http://pypi.corp.example/simple'}\n"
                        "matrix: {torch: [2.6.0], accelerator: [cpu], python: ['3.11']}\n")
    with pytest.raises(InputError, match="is plain HTTP and has credentials"):
        matrix_mod.load(path, table, env=env)
    matrix_mod.load(path, table, env=allowed)
