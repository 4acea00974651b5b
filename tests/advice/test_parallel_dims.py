"""spec/mesh.ParallelDims: the plan's degrees over a world, one case per check `validate` makes (the one-line
errors the preflight gives), the HSDP split by node and a rank's place in the grid."""

from __future__ import annotations

import pytest

from paradvisor.errors import InputError
from paradvisor.spec.mesh import ParallelDims
from paradvisor.spec.plan import NodeAllocation, Plan


@pytest.mark.parametrize(
    ("plan", "world", "kw", "fragment"),
    [
        (
            Plan(dp=4),
            2,
            {"launch": "1 node(s) x 2 process(es)"},
            "plan dp x tp x pp = 4 x 1 x 1 = 4, but the launch starts 1 node(s) x 2 process(es) = 2 processes",
        ),
        (Plan(dp=2, cp=2), 2, {}, "dp x cp x tp x pp = 2 x 2 x 1 x 1 = 4"),
        (Plan(dp=1, tp=4), 4, {"node_procs": (2, 2)}, "TP degree 4 does not divide node 0's 2 processes"),
        (
            Plan(dp=6, sharding="hsdp"),
            6,
            {"node_procs": (4, 2)},
            "HSDP shards over each node's 4 processes, which must divide dp = 6",
        ),
        (Plan(dp=2, cp=3), 6, {"seq_len": 64}, "2 x cp = 6 chunks: seq_len 64"),
        (
            Plan(dp=1, tp=3, sequence_parallel=True),
            3,
            {"seq_len": 64},
            "sequence parallelism splits the sequence over TP 3",
        ),
    ],
)
def test_validate_refuses_with_one_line(plan, world, kw, fragment):
    launch, seq_len = kw.pop("launch", ""), kw.pop("seq_len", None)
    with pytest.raises(InputError) as exc:
        ParallelDims.of(plan, world, node_procs=kw.get("node_procs", ())).validate(
            "p.toml", launch=launch, seq_len=seq_len
        )
    assert fragment in str(exc.value) and "\n" not in str(exc.value)


def test_a_valid_plan_passes_and_names_its_degrees():
    dims = ParallelDims.of(Plan(dp=4, tp=2, sharding="fsdp"), 8, node_procs=(4, 4))
    dims.validate("p.toml", seq_len=64)
    assert (dims.dp_shard, dims.dp_replicate, dims.tp) == (4, 1, 2)
    assert dims.dp_enabled and dims.tp_enabled and dims.fsdp_enabled and not dims.pp_enabled
    assert dims.dims() == [("pp", 1), ("dp_replicate", 1), ("dp_shard", 4), ("tp", 2)]


def test_hsdp_shards_inside_a_node():
    two_nodes = ParallelDims.of(Plan(dp=8, sharding="hsdp"), 8, node_procs=(4, 4))
    one_node = ParallelDims.of(Plan(dp=8, sharding="hsdp"), 8, node_procs=(8,))
    nodes = tuple(NodeAllocation(n, g, 100.0, 1.0, 1, g / 8) for n, g in (("a", 2), ("b", 6)))
    listed = ParallelDims.of(Plan(dp=8, sharding="hsdp", nodes=nodes), 8)
    assert (two_nodes.dp_replicate, two_nodes.dp_shard) == (2, 4)
    assert (one_node.dp_replicate, one_node.dp_shard) == (
        2,
        4,
    )  # one machine: half the ranks stand in for a node
    assert (listed.dp_replicate, listed.dp_shard) == (4, 2)


def test_coords_are_megatron_order():
    dims = ParallelDims.of(Plan(dp=2, tp=2, pp=2), 8)
    c = dims.coords(5)  # pp 1, dp 0, tp 1
    assert (c.pp_rank, c.dp_rank, c.tp_rank, c.holds_loss) == (1, 0, 1, True)
    cp = ParallelDims.of(Plan(dp=2, cp=2, tp=2), 8).coords(6)  # dp 1, cp 1, tp 0
    assert (cp.dp_rank, cp.cp_rank, cp.tp_rank) == (1, 1, 0)
