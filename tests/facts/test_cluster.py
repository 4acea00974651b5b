"""Cluster files: every shipped example, and each kind of bad input."""

import json

import pytest

from paradvisor.errors import InputError
from paradvisor.hardware.cluster import load_cluster
from tests.conftest import EXAMPLES, assert_one_line_error

EXPECTED = {
    "paper000-two-servers.toml": (2, 6, {"TITAN RTX": 2, "RTX 3090": 4}),
    "paper001-a30-titanxp.toml": (2, 6, {"A30": 2, "TITAN Xp": 4}),
    "paper003-geo-four-nodes.toml": (
        4,
        16,
        {"RTX 2080 Ti": 7, "TITAN RTX": 1, "A30": 4, "RTX 3090": 2, "V100": 2},
    ),
    "paper004-vgg-2080ti.toml": (4, 8, {"RTX 2080 Ti": 8}),
    "h100-8x-nvlink.toml": (1, 8, {"H100 SXM": 8}),
    "h100-4x8-infiniband.toml": (4, 32, {"H100 SXM": 32}),
    "a100-8x8-ethernet.toml": (8, 64, {"A100 80GB": 64}),  # one node group of 8
}


def test_every_example_is_covered():
    assert {p.name for p in EXAMPLES.glob("*.toml")} == set(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_example_clusters(name, cli):
    nodes, gpus, types = EXPECTED[name]
    c = load_cluster(EXAMPLES / name)
    assert len(c.nodes) == nodes and c.gpu_count == gpus
    counts: dict[str, int] = {}
    for n in c.nodes:
        for g in n.gpus:
            counts[g.spec.name] = counts.get(g.spec.name, 0) + 1
    assert counts == types
    # every pair of nodes has a link, stored by what is distinct (here one [network] default)
    assert all(c.link_between(a.name, b.name) for a in c.nodes for b in c.nodes)
    assert (c.links.default is not None) == (nodes > 1) and not c.links.pairs
    proc = cli("detect", "--cluster", str(EXAMPLES / name), "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["gpu_count"] == gpus


def test_paper003_network_is_a_1gbit_wan():
    c = load_cluster(EXAMPLES / "paper003-geo-four-nodes.toml")
    lk = c.link_between("node-1", "node-4")
    assert lk.kind == "wan" and lk.bandwidth == pytest.approx(125e6) and lk.latency == pytest.approx(0.02)


def test_ib_cluster_uses_nvlink_inside_nodes():
    c = load_cluster(EXAMPLES / "h100-4x8-infiniband.toml")
    assert c.nodes[0].intra_link.kind == "nvlink4"
    assert c.link_between("node-0", "node-3").bandwidth == pytest.approx(400e9)


GOOD = """name = "t"
[[node]]
name = "a"
gpus = [{ type = "A30", count = 2 }]
[[node]]
name = "b"
gpus = [{ type = "A30", count = 1 }]
[network]
kind = "ethernet"
bandwidth = "10 Gbit/s"
"""

BAD = [
    ("syntax", GOOD.replace('name = "a"', 'name = "a'), ["TOML syntax error", ":3"]),
    (
        "unknown gpu",
        GOOD.replace('"A30", count = 2', '"A3O", count = 2'),
        ["unknown GPU type 'A3O'", "node[0].gpus[0].type", "'A30'"],
    ),
    (
        "negative count",
        GOOD.replace("count = 2", "count = -2"),
        ["node[0].gpus[0].count", "at least 1", ":4"],
    ),
    ("zero count", GOOD.replace("count = 1", "count = 0"), ["node[1].gpus[0].count"]),
    ("missing link", GOOD.split("[network]")[0], ["missing link between nodes 'a' and 'b'"]),
    ("unknown key", GOOD.replace('name = "b"', 'name = "b"\ngpu = 3'), ["unknown key 'gpu'", "node[1]"]),
    ("bad bandwidth", GOOD.replace('"10 Gbit/s"', '"fast"'), ["network", "expected a bandwidth"]),
    (
        "unknown link kind",
        GOOD.replace('kind = "ethernet"', 'kind = "carrier-pigeon"'),
        ["unknown link kind"],
    ),
    ("duplicate node", GOOD.replace('name = "b"', 'name = "a"'), ["duplicate node name 'a'"]),
    ("no nodes", 'name = "x"\n', ["at least one [[node]]"]),
    (
        "bad host",
        GOOD.replace('name = "a"', 'name = "a"\nhost = "-oProxyCommand=x"'),
        ["invalid host", "node[0].host"],
    ),
]


@pytest.mark.parametrize("label,text,fragments", BAD, ids=[b[0] for b in BAD])
def test_bad_cluster_files(tmp_path, cli, label, text, fragments):
    f = tmp_path / "c.toml"
    f.write_text(text)
    with pytest.raises(InputError) as exc:
        load_cluster(f)
    for frag in fragments:
        assert frag in str(exc.value), (frag, str(exc.value))
    proc = cli("detect", "--cluster", str(f))
    assert_one_line_error(proc, str(f), fragments[0])


def test_missing_cluster_file(cli, tmp_path):
    assert_one_line_error(cli("detect", "--cluster", str(tmp_path / "nope.toml")), "file not found")


def test_tables_alike_share_their_checks_but_not_their_own_keys(tmp_path):
    """Tables that differ only in name/host share one check of their GPUs, link and RAM (hardware/nodetable.py)
    and their Nodes share those values; a later table's own keys are still checked, named with its own line."""
    table = '[[node]]\nname = "n{i}"\nhost = "{host}"\ngpus = [{{ type = "H100 SXM", count = 8 }}]\nram = "1 TiB"\n'
    good = tmp_path / "alike.toml"
    good.write_text(
        "".join(table.format(i=i, host=f"10.0.0.{i}") for i in range(3)) + '[network]\nkind = "ib-ndr"\n'
    )
    c = load_cluster(good)
    assert [n.host for n in c.nodes] == ["10.0.0.0", "10.0.0.1", "10.0.0.2"]
    assert c.nodes[0].gpus is c.nodes[2].gpus and c.nodes[2].ram_total_bytes == 1 << 40
    bad = tmp_path / "alike-bad.toml"
    bad.write_text("".join(table.format(i=i, host="bad host!" if i == 2 else "h") for i in range(3)))
    with pytest.raises(InputError, match=r"alike-bad.toml:13: node\[2\].host"):
        load_cluster(bad)


def test_an_error_location_is_found_only_when_reported():
    from paradvisor.tomlfile import KeyLocator

    loc = KeyLocator("c.toml", '[[node]]\nname = "a"\n[[node]]\nname = "b"\ncount = 0\n')
    where = loc.at("node", 1, "count", "node[1]").then(".count")
    assert loc._index is None  # nothing indexed yet: a file without errors is never indexed
    assert str(InputError("bad", where=where)) == "c.toml:5: node[1].count: bad"
