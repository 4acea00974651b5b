"""One view of the ranked plans (plan/view.py): the CLI table, the TUI's Plans tab and --json show the same
ranks, labels and moves, because the first two read the rows and the rows carry the JSON's numbers."""

from paradvisor.hardware.cluster import load_cluster
from paradvisor.plan.advice import Request, advise
from paradvisor.plan.report import to_doc
from paradvisor.plan.view import plan_rows, rule_moves
from paradvisor.units import GiB
from tests.conftest import REPO


def test_rows_carry_the_json_documents_ranks_and_moves():
    cluster = load_cluster(REPO / "examples" / "clusters" / "paper000-two-servers.toml")
    rec = advise(Request(model="bert-base-uncased", cluster=cluster, top=20))
    doc = to_doc(rec)
    rows = plan_rows(rec)
    assert [r.label for r in rows] == [p["label"] for p in doc["plans"]]
    assert [r.cost_rank for r in rows] == [p["cost_model_rank"] for p in doc["plans"]]
    for r, p in zip(rows, doc["plans"]):
        assert (
            r.memory == f"{p['memory']['per_gpu_bytes'] / GiB:.1f}/{p['memory']['capacity_bytes'] / GiB:.0f}"
        )
        assert r.moved == ((r.cost_rank > r.rank) - (r.cost_rank < r.rank) if r.moved_by else 0)
    moved = [r for r in rows if r.moved]
    assert moved, "a rule reorders 000's bert plans (000-tp-beats-dp-on-fast-links)"
    assert any(not r.moved and r.cost_rank != r.rank for r in rows), "a plan only displaced is not marked"
    assert len(rule_moves(rec)) == sum(len(f.get("moved", [])) for f in rec.fired_rules)
    assert len(plan_rows(rec, 2)) == 2
