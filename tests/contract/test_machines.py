"""One machines resolver (hardware/machines.py): a cluster file, --gpus/--gpu-type, this machine or probed
hosts become a Cluster and a ClusterRef, the same for every command and the TUI; the reference is what a saved
preset's [cluster] table holds and reads back."""

import ast
from pathlib import Path

import pytest

from paradvisor.errors import InputError
from paradvisor.hardware.machines import ClusterRef, resolve_machines
from paradvisor.hardware.types import Cluster
from tests.conftest import REPO

SRC = REPO / "src" / "paradvisor"
FILE = REPO / "examples" / "clusters" / "h100-8x-nvlink.toml"


def test_each_way_of_naming_machines_resolves_to_a_cluster_and_its_reference(monkeypatch):
    monkeypatch.chdir(REPO)
    c, ref = resolve_machines(cluster_file=str(FILE))
    assert isinstance(c, Cluster) and ref == ClusterRef(file="examples/clusters/h100-8x-nvlink.toml")
    c, ref = resolve_machines(gpus=4, gpu_type="h100-sxm", link="nvlink4")
    assert sum(n.gpu_count for n in c.nodes) == 4 and ref.to_doc() == {
        "gpus": 4,
        "gpu_type": "H100 SXM",
        "link": "nvlink4",
    }
    c, ref = resolve_machines()  # this machine (PARADVISOR_GPUS=none in the suite: no GPU)
    assert ref.to_doc() == {"local": True} and len(c.nodes) == 1
    assert resolve_machines(cluster_file=str(FILE), file_ref="mine.toml")[1].file == "mine.toml"


@pytest.mark.parametrize(
    "kw, message",
    [
        ({"cluster_file": "x.toml", "gpus": 2, "gpu_type": "A100"}, "either --cluster or --gpus"),
        ({"gpus": 2}, "--gpus and --gpu-type go together"),
        ({"cluster_file": "x.toml", "hosts": ["a"]}, "either --cluster or --host"),
    ],
)
def test_contradictory_names_are_one_clear_error(kw, message):
    with pytest.raises(InputError, match=message):
        resolve_machines(**kw)


@pytest.mark.parametrize(
    "ref",
    [
        ClusterRef(file="c.toml"),
        ClusterRef(local=True),
        ClusterRef(hosts=("127.0.0.1", "gpu-box-2")),
        ClusterRef(gpus=2, gpu_type="H100 SXM", link="nvlink4"),
    ],
)
def test_a_reference_is_its_preset_table_and_back(ref):
    doc = ref.to_doc()
    assert ClusterRef.from_doc(doc) == ref and all(v not in (None, False, []) for v in doc.values())


def test_commands_and_the_tui_reach_machines_only_through_the_resolver():
    """No command or TUI module loads a cluster file, builds a --gpus cluster or detects this machine itself
    (each once had its own way, and the TUI's "Add host" saved a reference no preset could load)."""
    direct = {"load_cluster", "single_node_cluster", "detect_local", "cluster_from_nodes"}
    found = []
    for path in [*(SRC / "commands").glob("*.py"), *(SRC / "tui").rglob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.ImportFrom)
                and node.module
                and node.module.startswith("paradvisor.hardware")
            ):
                found += [f"{Path(path).relative_to(SRC)}: {a.name}" for a in node.names if a.name in direct]
    assert not found, found
