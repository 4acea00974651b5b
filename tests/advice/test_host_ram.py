"""Node RAM against a plan's host offload (issue 27, item 4): the cluster file's `ram` is the node's RAM (it was
checked, then dropped, so every node got the assumed 64 GiB), and a plan whose offloaded states do not fit it
is never ranked; the plans that do not fit say it is the host RAM, not the GPU."""

from paradvisor.hardware.cluster import parse_cluster
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
    offload = [
        i for i in rec.infeasible if i["plan"]["offload"] != "none" and i["needs_bytes"] <= i["usable_bytes"]
    ]
    assert offload and all("host RAM" in i["why"] and "only 2 GiB" in i["why"] for i in offload)


def test_with_the_ram_for_it_the_offload_plans_fit():
    rec = advise(Request(model="llama-2-7b", cluster=cluster("2 TiB"), top=50))
    assert any(e.plan.offload != "none" for e in rec.plans)
