"""The engine's HTTP client (ports.engine.DockerEngine): what it reads from the environment per request."""

from __future__ import annotations


def test_the_engine_client_skips_proxies_and_netrc_on_a_unix_socket_only() -> None:
    """requests reads the environment's proxies and ~/.netrc on every request of a session that trusts the
    environment: for the engine's Unix socket neither applies (a run makes hundreds of calls); a TCP engine keeps
    them, as the docker CLI does."""
    import docker

    from imagebuilder.ports.engine import DockerEngine

    local = DockerEngine(docker.APIClient(base_url="unix:///var/run/docker.sock", version="1.41"))
    remote = DockerEngine(docker.APIClient(base_url="tcp://engine.example:2375", version="1.41"))
    assert local.api.trust_env is False and remote.api.trust_env is True
