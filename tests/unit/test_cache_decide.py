"""What the plan decides from cache lookups (the lookups themselves run on the real engine and registry
in tests/integration/test_incremental.py)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from imagebuilder.input import matrix as matrix_mod
from imagebuilder.input.compat import CompatTable
from imagebuilder.plan import cache as cache_mod
from imagebuilder.plan import keys
from imagebuilder.plan import plan as plan_mod
from imagebuilder.plan.plan import Decision, Node, State
from imagebuilder.plan.render import Renderer
from imagebuilder.ports.registry import Registries

from ..conftest import MatrixWriter

TREE = """
base_image: debian:bookworm
registry: 127.0.0.1:5000/ml
repository: pytorch
layers: [base, business, task, {layer: jupyter, name: eval, parent: business}]
matrix: {torch: [2.6.0], accelerator: [cpu], python: ["3.11"]}
"""


@dataclass
class Known(cache_mod.Cache):
    """A cache whose lookups answer from a set of node ids (instead of the engine and registry)."""

    present: set[str] = field(default_factory=set)

    def lookup(self, node: Node, parent: Node | None = None) -> Decision | None:
        image = "sha256:" + "a" * 64
        return Decision(State.CACHED, f"image {image[7:19]} has this key", image=image) if node.id in self.present \
            else None

    earlier: dict[str, dict[str, str]] = field(default_factory=dict)  # node id -> an earlier image's inputs

    def previous_inputs(self, node: Node) -> dict[str, str] | None:
        return self.earlier.get(node.id)

    def registry_asked(self, node: Node) -> bool:
        return True


def decided(write_matrix: MatrixWriter, table: CompatTable, present: set[str], rebuild: bool = False,
            built_before: bool = False) -> dict[str, tuple[str, str]]:
    """Each node's decision; `built_before`: every node had an earlier image, with the inputs it has now."""
    plan = plan_mod.make(matrix_mod.load(write_matrix(TREE), table, env={}), Renderer())
    plan = keys.assign(plan, {"debian:bookworm": "sha256:" + "1" * 64})
    earlier = {n.id: dict(n.inputs) for n in plan.nodes} if built_before else {}
    out = cache_mod.decide(plan, Known(None, None, present=present, earlier=earlier),  # type: ignore[arg-type]
                           rebuild=rebuild)
    return {n.name: (n.status, n.reason) for n in out.nodes}


ALL = {f"2.6.0-cpu-py3.11-runtime/{x}" for x in ("base", "business", "task", "eval")}


def test_all_present_is_all_cached(write_matrix: MatrixWriter, table: CompatTable) -> None:
    assert {k: v[0] for k, v in decided(write_matrix, table, ALL).items()} == dict.fromkeys(
        ("base", "business", "task", "eval"), "cached")


def test_a_missing_parent_rebuilds_every_descendant(write_matrix: MatrixWriter, table: CompatTable) -> None:
    got = decided(write_matrix, table, ALL - {"2.6.0-cpu-py3.11-runtime/business"})
    assert got["base"][0] == "cached"
    assert got["business"][0] == "build"
    never = ("build", keys.NEVER_BUILT)  # the fake cache knows no earlier image
    assert got["task"] == never and got["eval"] == never
    again = decided(write_matrix, table, ALL - {"2.6.0-cpu-py3.11-runtime/business"}, built_before=True)
    assert again["task"] == ("build", "parent rebuilt") and again["eval"] == ("build", "parent rebuilt")


def test_a_missing_leaf_rebuilds_only_itself(write_matrix: MatrixWriter, table: CompatTable) -> None:
    got = decided(write_matrix, table, ALL - {"2.6.0-cpu-py3.11-runtime/eval"})
    assert [got[x][0] for x in ("base", "business", "task", "eval")] == ["cached", "cached", "cached", "build"]


def test_no_cache_builds_everything(write_matrix: MatrixWriter, table: CompatTable) -> None:
    got = decided(write_matrix, table, ALL, rebuild=True)
    assert set(got.values()) == {("build", "--no-cache: everything builds")}


def test_registry_references_and_credentials(tmp_path: object) -> None:
    import base64
    import json
    from pathlib import Path

    from imagebuilder.ports.credentials import credentials
    from imagebuilder.ports.reference import split_reference
    from imagebuilder.ports.registry import Registry

    assert split_reference("127.0.0.1:5000/ml/pytorch:cache-0123456789ab") == ("127.0.0.1:5000", "ml/pytorch",
                                                                              "cache-0123456789ab")
    assert split_reference("ubuntu:24.04") == ("docker.io", "library/ubuntu", "24.04")
    assert split_reference("ghcr.io/org/img@sha256:" + "f" * 64)[2] == "sha256:" + "f" * 64
    folder = Path(str(tmp_path))
    (folder / "config.json").write_text(json.dumps({"auths": {"https://reg.example.com": {
        "auth": base64.b64encode(b"robot:s3cret").decode()}}}))
    env = {"DOCKER_CONFIG": str(folder)}
    assert credentials("reg.example.com", env) == ("robot", "s3cret")
    assert credentials("other.example.com", env) is None
    assert credentials("x", {"IMAGEBUILDER_REGISTRY_USER": "u", "IMAGEBUILDER_REGISTRY_PASSWORD": "p"},
                       scope=("x",)) == ("u", "p")
    loopback, remote = Registry.for_host("127.0.0.1:5000"), Registry.for_host("reg.example.com")
    assert loopback.base == "https://127.0.0.1:5000/v2/" and loopback.insecure  # TLS first; plain HTTP if it has none
    assert remote.base == "https://reg.example.com/v2/" and not remote.insecure
    assert "s3cret" not in repr(Registry("reg.example.com", auth=("robot", "s3cret")))


@dataclass
class Listing:
    """An engine that lists images (id, creation time, labels) and does nothing else."""

    images: list[dict[str, object]]

    def images_with_label(self, label: str, *, every: bool = False) -> list[dict[str, object]]:
        return self.images


def test_the_previous_image_of_a_node_is_the_newest_from_the_same_layer_folder(
        write_matrix: MatrixWriter, table: CompatTable) -> None:
    """Keys name no repository, so another layer folder's image of the same node (another test, another
    team's copy of the layer) is not this node's history; a newer one from the same folder is. The images carry
    the labels a build gives them: a scoped node (task here) is known by its layer and its scope's versions, so
    an image of the same layer with another torch is not its history either."""
    plan = keys.assign(plan_mod.make(matrix_mod.load(write_matrix(TREE), table, env={}), Renderer()),
                       {"debian:bookworm": "sha256:" + "1" * 64})
    task = plan.node("2.6.0-cpu-py3.11-runtime/task")
    assert task.scope is not None and f"{keys.LABEL_PREFIX}.node" not in keys.content_labels(task)
    own = next(name for name, _ in task.inputs if name.startswith("template:") and name.endswith("/Dockerfile.j2"))

    def image(created: int, template: str, mark: str, **versions: str) -> dict[str, object]:
        inputs = {template: "0" * 64, "mark": mark}
        labels = keys.content_labels(task)
        labels.update({f"{keys.LABEL_PREFIX}.version.{name}": value for name, value in versions.items()})
        return {"Id": f"sha256:{created:064d}", "Created": created, "Labels": {
            **labels, keys.KEY_LABEL: f"key{created}", keys.INPUTS_LABEL: json.dumps(inputs)}}

    engine = Listing([image(1, own, "older, same folder"), image(2, own, "newest, same folder"),
                      image(3, "template:/elsewhere/layers/task/Dockerfile.j2", "newest of all, other folder"),
                      image(4, own, "same folder, another torch", torch="2.7.1")])
    offline = Registries(lambda host: None, use=False)  # type: ignore[arg-type,return-value]
    cache = cache_mod.Cache(engine, offline)  # type: ignore[arg-type]
    previous = cache.previous_inputs(task)
    assert previous is not None and previous["mark"] == "newest, same folder"
    assert cache_mod.Cache(Listing([image(3, "template:/elsewhere/x/Dockerfile.j2", "other")]),  # type: ignore[arg-type]
                           offline).previous_inputs(task) is None


def test_a_nodes_image_is_where_its_key_label_starts() -> None:
    """base's image, business's build steps (they inherit base's key label) and business's image: only the
    two LABEL steps are node images, hidden (untagged, with children) or not; a pulled image has no parent."""
    def image(iid: str, parent: str, key: str | None) -> dict[str, object]:
        return {"Id": iid, "ParentId": parent, "Labels": {keys.KEY_LABEL: key} if key else {}}

    images = [image("base-step", "", None), image("base", "base-step", "kb"),
              image("business-step-1", "base", "kb"), image("business-step-2", "business-step-1", "kb"),
              image("business", "business-step-2", "kn"), image("pulled", "", "kp")]
    labelled = [i for i in images if i["Labels"]]
    assert [i["Id"] for i in cache_mod.node_images(labelled)] == ["base", "business", "pulled"]
