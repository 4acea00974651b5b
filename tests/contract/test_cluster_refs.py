"""Every cluster reference the CLI and the TUI make ([cluster] of a saved preset: a file, this machine, hosts
added over ssh, --gpus/--gpu-type) saves and loads back as written (the TUI's "Add host" once saved
`hosts = true`, and its preset did not load: `cluster.hosts: unknown key`)."""

import pytest

from paradvisor.errors import InputError
from paradvisor.hardware.cluster import single_node_cluster
from paradvisor.launch.preflight import validate
from paradvisor.plan.advice import Request, advise
from paradvisor.rundir.from_plan import preset_from_estimate
from paradvisor.spec.preset import load_preset, save_preset
from tests.conftest import REPO

CLUSTER_FILE = REPO / "examples" / "clusters" / "h100-8x-nvlink.toml"


@pytest.mark.parametrize(
    "ref",
    [
        {"file": str(CLUSTER_FILE)},
        {"local": True},
        {"hosts": ["127.0.0.1", "gpu-box-2"]},  # tui/panes/hardware.py add_host
        {"gpus": 2, "gpu_type": "H100 SXM", "link": "nvlink4"},
    ],
)
def test_a_saved_preset_keeps_its_cluster_reference(tmp_path, ref):
    cluster = single_node_cluster("H100 SXM", 2)
    rec = advise(Request(model="gpt2", cluster=cluster, cluster_ref=ref, top=1))
    preset = preset_from_estimate(rec, rec.plans[0], ref, name="ref")
    path = save_preset(tmp_path / "ref.toml", preset.to_doc())
    back = load_preset(path)
    assert back.cluster == ref
    validate(back, reach=False)


def test_a_missing_cluster_file_is_refused_before_anything_starts(tmp_path):
    rec = advise(Request(model="gpt2", cluster=single_node_cluster("H100 SXM", 2), top=1))
    preset = preset_from_estimate(rec, rec.plans[0], {"file": str(tmp_path / "gone.toml")}, name="gone")
    path = save_preset(tmp_path / "gone.toml.preset", preset.to_doc())
    with pytest.raises(InputError, match="cluster file not found"):
        validate(load_preset(path), reach=False)
