"""Node RAM against a plan's host offload (issue 27, item 4): the cluster file's `ram` is the node's RAM (it was
checked, then dropped, so every node got the assumed 64 GiB), and a plan whose offloaded states do not fit it
is never ranked; the plans that do not fit say it is the host RAM, not the GPU."""

from dataclasses import replace

from paradvisor.hardware.cluster import parse_cluster
from paradvisor.hardware.types import SameDevices
from paradvisor.plan.advice import Request, advise


def cluster(ram: str):
    text = f'name = "r"\n[[node]]\nname = "a"\ngpus = [{{ type = "T4", count = 2 }}]\nram = "{ram}"\n'
    import tomllib

    return parse_cluster(tomllib.loads(text), path="r.toml", text=text)


def test_the_cluster_files_ram_is_the_nodes_ram():
    assert cluster("2 GiB").nodes[0].ram_total_bytes == 2 * 2**30


def test_an_offload_that_needs_more_ram_than_the_node_has_is_not_ranked():
    rec = advise(Request(model="llama-2-7b", cluster=cluster("2 GiB"), top=20))
    assert all(e.plan.offload == "none" for e in rec.plans)
    offload = [i for i in rec.infeasible if i.plan["offload"] != "none" and i.needs_bytes <= i.usable_bytes]
    assert offload and all("host RAM" in i.why and "only 2 GiB" in i.why for i in offload)


def test_with_the_ram_for_it_the_offload_plans_fit():
    rec = advise(Request(model="llama-2-7b", cluster=cluster("2 TiB"), top=50))
    assert any(e.plan.offload != "none" for e in rec.plans)


def test_a_node_of_many_like_gpus_counts_its_memory_once_not_per_gpu():
    """A planned node of 16,384 like GPUs holds one device template (hardware/types.SameDevices); its total
    GPU memory (what the assumed host RAM is worked out from) is a product, equal to the sum over devices:
    the sum made 16,384 device objects per offload plan (92 s for `recommend --gpus 16384`)."""
    node = cluster("2 GiB").nodes[0]
    assert node.gpu_memory_bytes == sum(d.memory_bytes for d in node.gpus) == 2 * node.gpus[0].memory_bytes
    big = replace(node, gpus=SameDevices(node.gpus[0], 16384))
    assert big.gpu_memory_bytes == 16384 * node.gpus[0].memory_bytes
