"""Scale (issue 15): clusters stored by node groups rank exactly as the per-rank code did, and large
clusters cost what is distinct in them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from paradvisor.errors import InputError
from paradvisor.hardware.cluster import load_cluster, parse_cluster, single_node_cluster
from paradvisor.hardware.types import SameDevices
from paradvisor.limits import MAX_GPUS, MAX_GPUS_PER_NODE, MAX_NODES
from paradvisor.model.load import load_profile
from paradvisor.plan.evaluate import evaluate
from paradvisor.plan.facts import ModelFacts, Topology
from paradvisor.plan.search import choose_precision, recommend
from paradvisor.plan.space import candidates, divisors
from paradvisor.spec.plan import Workload
from tests.conftest import EXAMPLES, FUZZ_SCALE, REPO

RANKINGS = json.loads((Path(__file__).parent.parent / "data" / "rankings.json").read_text())


@pytest.mark.parametrize("case", RANKINGS, ids=[f"{c['cluster']}-{c['model']}" for c in RANKINGS])
def test_same_ranking_as_before_node_groups(case):
    """tests/data/rankings.json was written by tests/data/make_rankings.py from the code before clusters
    were stored by node groups: every figure of the top plans, and the links of the layouts, must agree."""
    cluster = load_cluster(EXAMPLES / case["cluster"])
    profile = load_profile(case["model"])
    wl = Workload(model=case["model"], seq_len=case["seq_len"], global_batch=case["global_batch"])
    precision = choose_precision(cluster, wl.precision)
    mf, topo = ModelFacts.of(profile), Topology.of(cluster)
    est = [evaluate(mf, topo, wl, p, precision, 0.10) for p in candidates(mf, topo, wl, precision)]
    feasible = sorted((e for e in est if e.fits), key=lambda e: (e.score, e.memory_total))
    assert len(est) == case["candidates"] and len(feasible) == case["feasible"]
    got = [
        {
            "plan": {k: v for k, v in e.plan.to_dict().items() if k != "nodes" and k in r["plan"]},
            "label": e.plan.label(),
            "step_time": float(f"{e.step_time:.9g}"),
            "memory": round(e.memory_total),
            "fits": e.fits,
        }
        for e, r in zip(feasible, case["top"])
    ]
    assert got == case["top"]
    for key, link in case["dp_links"].items():
        assert list(topo.dp_link(*map(int, key.split(",")))) == link, key
    for key, link in case["pp_links"].items():
        assert list(topo.pp_link(*map(int, key.split(",")))) == link, key


def _brute_dp_link(topo, tp, dp, pp):
    """The per-rank algorithm the grouped one replaced (kept here as the reference), on per-rank and
    per-node lists made from the cluster's nodes directly, not from the topology's segments."""
    rank_node, intra = [], []
    for i, node in enumerate(topo.cluster.online_nodes):
        intra.append(node.intra_link)
        rank_node += [i] * node.gpu_count
    assert rank_node == list(topo.rank_node) and intra == list(topo.intra)
    groups = [tuple(k * tp * dp + i * tp + j for i in range(dp)) for k in range(pp) for j in range(tp)]
    per_node: dict[int, int] = {}
    for g in groups:
        ns = {rank_node[r] for r in g}
        if len(ns) > 1:
            for n in ns:
                per_node[n] = per_node.get(n, 0) + 1
    conc = max(per_node.values()) if per_node else 1

    def link(g):
        nodes = {rank_node[r] for r in g}
        bw, lat = min(intra[n].bandwidth for n in nodes), max(intra[n].latency for n in nodes)
        if len(nodes) == 1 or topo.inter is None:
            return bw, lat, False
        return min(bw, topo.inter.bandwidth / conc), max(lat, topo.inter.latency), True

    return min((link(g) for g in groups), key=lambda t: t[0])


MIXED = """name = "mixed"
[[node]]
name = "a"
count = 3
gpus = [{ type = "A100 80GB", count = 4 }]
link = "nvlink3"
[[node]]
name = "b"
gpus = [{ type = "A30", count = 2 }, { type = "A10", count = 2 }]
link = "pcie4"
[[node]]
name = "c"
count = 2
gpus = [{ type = "H100 SXM", count = 8 }]
[network]
kind = "ib-hdr"
[[link]]
nodes = ["a", "c"]
kind = "ethernet"
bandwidth = "25 Gbit/s"
"""


def test_grouped_dp_link_equals_the_per_rank_algorithm():
    import tomllib

    c = parse_cluster(tomllib.loads(MIXED), path="mixed.toml", text=MIXED)
    topo = Topology.of(c)
    assert [s.count for s in topo.segments] == [3, 1, 2] and topo.world == 3 * 4 + 4 + 16
    checked = 0
    for tp in (1, 2, 4, 8):
        for pp in divisors(topo.world // tp):
            if topo.world % (tp * pp):
                continue
            dp = topo.world // (tp * pp)
            assert topo.dp_link(tp, dp, pp) == _brute_dp_link(topo, tp, dp, pp), (tp, dp, pp)
            checked += 1
    assert checked > 10
    assert c.slowest_inter_link().kind == "ethernet"  # the group link a<->c, slower than the default


def test_node_groups_expand_to_named_nodes_sharing_one_gpu_tuple():
    import tomllib

    c = parse_cluster(tomllib.loads(MIXED), path="mixed.toml", text=MIXED)
    assert [n.name for n in c.nodes] == ["a-0", "a-1", "a-2", "b", "c-0", "c-1"]
    assert c.nodes[0].gpus is c.nodes[2].gpus
    assert c.link_between("a-1", "c-0").bandwidth == pytest.approx(25e9 / 8)
    assert c.link_between("a-0", "a-2").kind == "ib-hdr"
    assert c.link_between("a-0", "b").kind == "ib-hdr"
    assert len(c.runs()) == 3


def test_group_link_inside_a_group_and_missing_links_are_found_per_group():
    import tomllib

    text = """[[node]]
name = "pod"
count = 4
gpus = [{ type = "H100 SXM", count = 8 }]
[[node]]
name = "solo"
gpus = [{ type = "H100 SXM", count = 8 }]
[[link]]
nodes = ["pod", "pod"]
kind = "ib-ndr"
"""
    with pytest.raises(InputError, match="missing link between nodes 'pod-0' and 'solo'"):
        parse_cluster(tomllib.loads(text), path="x.toml", text=text)
    text += '[[link]]\nnodes = ["pod", "solo"]\nkind = "ethernet"\n'
    c = parse_cluster(tomllib.loads(text), path="x.toml", text=text)
    assert c.link_between("pod-1", "pod-3").kind == "ib-ndr"
    assert c.link_between("pod-1", "solo").kind == "ethernet"
    assert c.slowest_inter_link().kind == "ethernet"


@pytest.mark.parametrize(
    "text,fragment",
    [
        ('[[node]]\nname = "p"\ncount = 0\ngpus = [{ type = "A30" }]\n', "a node count of at least 1"),
        (
            f'[[node]]\nname = "p"\ncount = {MAX_NODES + 1}\ngpus = [{{ type = "A30" }}]\n',
            "more than the 16,384 allowed",
        ),
        (
            (
                f'[[node]]\nname = "p"\ncount = 16\ngpus = [{{ type = "A30", count = {MAX_GPUS_PER_NODE} }}]\n[network]\n'
                'kind = "ethernet"\n'
            ),
            "or 131,072 in the cluster",
        ),
        (
            f'[[node]]\nname = "p"\ngpus = [{{ type = "A30", count = {MAX_GPUS_PER_NODE + 1} }}]\n',
            "more than the 16,384",
        ),
        (
            '[[node]]\nname = "p"\ncount = 2\nhost = "h1"\ngpus = [{ type = "A30" }]\n[network]\nkind = "ethernet"\n',
            "hosts = [...]",
        ),
        (
            '[[node]]\nname = "p"\ncount = 2\nhosts = ["h1"]\ngpus = [{ type = "A30" }]\n[network]\nkind = "ethernet"\n',
            "a list of 2 host names",
        ),
        (
            (
                '[[node]]\nname = "p"\ncount = 2\ngpus = [{ type = "A30" }]\n[[node]]\nname = "p-1"\ngpus = []\n'
                '[network]\nkind = "ethernet"\n'
            ),
            "duplicate node name 'p-1'",
        ),
    ],
)
def test_bad_node_groups(text, fragment):
    import tomllib

    with pytest.raises(InputError, match=None) as exc:
        parse_cluster(tomllib.loads(text), path="bad.toml", text=text)
    assert fragment in str(exc.value)


def test_a_huge_single_node_keeps_one_device_template():
    c = single_node_cluster("H100", 16384)
    assert isinstance(c.nodes[0].gpus, SameDevices) and c.gpu_count == 16384
    assert c.nodes[0].gpus[16383].index == 16383
    topo = Topology.of(c)
    assert topo.world == 16384 and len(topo.specs) == 1 and topo.rank_spec[9999].name == "H100 SXM"
    with pytest.raises(InputError, match="more than the 131,072 allowed"):
        single_node_cluster("H100", MAX_GPUS + 1)


def test_thousands_of_nodes_plan_like_four():
    """2,048 nodes x 8 H100 ranks plans with the same per-GPU memory as 4 x 8 for the same per-GPU
    batch where the layout is the same (FSDP over all GPUs), and costs one segment."""
    import tomllib

    base = (EXAMPLES / "h100-4x8-infiniband.toml").read_text()
    network = base.partition("[network]")[2]
    text = (
        'name = "big"\n[[node]]\nname = "node"\ncount = 2048\ngpus = [{ type = "H100 SXM", count = 8 }]\n'
        'link = "nvlink4"\n[network]' + network
    )
    big = parse_cluster(tomllib.loads(text), path="big.toml", text=text)
    topo = Topology.of(big)
    assert len(topo.segments) == 1 and topo.world == 16384 and topo.node_count == 2048
    prof = load_profile("llama-3-8b")
    rec = recommend(prof, big, Workload(model="llama-3-8b", seq_len=4096, global_batch=16384))
    assert rec.plans and all(e.plan.world_size == 16384 for e in rec.plans)
    assert rec.evaluated > 100


def test_recommend_json_lists_a_node_group_once(tmp_path):
    f = tmp_path / "g.toml"
    f.write_text(
        '[[node]]\nname = "n"\ncount = 300\ngpus = [{ type = "A100", count = 8 }]\n'
        '[network]\nkind = "ib-hdr"\n'
    )
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "paradvisor",
            "recommend",
            "--model",
            "gpt2",
            "--cluster",
            str(f),
            "--json",
            "--top",
            "2",
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["cluster"]["gpu_count"] == 2400
    assert doc["cluster"]["nodes"] == [
        {
            "name": "n-0",
            "online": True,
            "gpus": [{"type": "A100 80GB", "count": 8}],
            "intra_link": "nvlink3",
            "count": 300,
            "last": "n-299",
        }
    ]


# ---- property: the grouped algorithms agree with the per-pair / per-rank ones on random clusters ----

LINKS = ["ethernet", "ib-hdr", "ib-ndr", "wan"]


@st.composite
def grouped_clusters(draw):
    groups = draw(
        st.lists(
            st.tuples(
                st.sampled_from([1, 2, 4, 8]),
                st.integers(1, 4),
                st.sampled_from(["A30", "A100 80GB", "H100 SXM"]),
                st.sampled_from(["pcie4", "nvlink3", "nvlink4"]),
            ),
            min_size=1,
            max_size=4,
        )
    )
    text = ""
    names = []
    for i, (size, count, gpu, link) in enumerate(groups):
        text += f'[[node]]\nname = "g{i}"\ncount = {count}\ngpus = [{{ type = "{gpu}", count = {size} }}]\nlink = "{link}"\n'
        names.append((f"g{i}", count))
    text += f'[network]\nkind = "{draw(st.sampled_from(LINKS))}"\n'
    for _ in range(draw(st.integers(0, 3))):
        a, b = draw(st.sampled_from(names)), draw(st.sampled_from(names))
        if a == b and a[1] == 1:
            continue
        text += f'[[link]]\nnodes = ["{a[0]}", "{b[0]}"]\nkind = "{draw(st.sampled_from(LINKS))}"\n'
    return text


@settings(max_examples=60 * FUZZ_SCALE)
@given(grouped_clusters())
def test_grouped_links_equal_brute_force(text):
    import tomllib

    c = parse_cluster(tomllib.loads(text), path="random.toml", text=text)
    online = c.online_nodes
    pairs = [c.link_between(a.name, b.name) for i, a in enumerate(online) for b in online[i + 1 :]]
    brute = min(pairs, key=lambda lk: (lk.bandwidth, -lk.latency)) if pairs else None
    assert c.slowest_inter_link() == brute
    topo = Topology.of(c)
    gcd = topo.gpus_per_node_gcd
    for tp in divisors(gcd):
        for pp in divisors(topo.world // tp):
            dp = topo.world // (tp * pp)
            assert topo.dp_link(tp, dp, pp) == _brute_dp_link(topo, tp, dp, pp), (tp, dp, pp)
