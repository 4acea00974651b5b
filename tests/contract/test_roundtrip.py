"""A ranked plan is a runnable plan: for random models, workloads and clusters (one node, several nodes,
unlike nodes, a WAN), every plan `recommend` ranks, saved as a preset, passes the launcher's preflight
with the process counts the plan needs — the same path as `recommend --save` then `launch --dry-run`."""

from __future__ import annotations

import math

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from paradvisor.hardware.cluster import load_cluster
from paradvisor.launch.runner import validate
from paradvisor.plan.advice import Request, advise
from paradvisor.spec.capability import family_of, why_not
from paradvisor.rundir.from_plan import preset_from_estimate
from paradvisor.spec.preset import load_preset, save_preset
from tests.conftest import REPO

MODELS = [
    "gpt-mini",
    "gpt2",
    "gpt2-medium",
    "bert-base-uncased",
    "albert-base-v2",
    "llama-150m",
    "llama-2-7b",
    "mistral-7b",
    "vgg16",
    "mixtral-8x7b",
    "olmoe-1b-7b",
    "qwen1.5-moe-a2.7b",
    str(REPO / "tests" / "data" / "models" / "qwen2-tiny" / "config.json"),
]
GPUS = ["H100 SXM", "A100 80GB", "A100 40GB", "RTX 3090", "V100", "T4", "TITAN RTX", "L40S", "A10"]
LINKS = [
    ("ethernet", "10 Gbit/s", "0.1 ms"),
    ("ib-ndr", "400 Gbit/s", "0.005 ms"),
    ("wan", "1 Gbit/s", "30 ms"),
]


@st.composite
def clusters(draw) -> str:
    nodes = draw(st.integers(1, 4))
    lines = ['name = "drawn"']
    for i in range(nodes):
        gpu = draw(st.sampled_from(GPUS))
        count = draw(st.sampled_from([1, 2, 3, 4, 6, 8]))
        lines += ["[[node]]", f'name = "n{i}"', f'gpus = [{{ type = "{gpu}", count = {count} }}]']
        if draw(st.booleans()):
            lines.append(f'host = "127.0.0.{i + 1}"')
    kind, bw, lat = draw(st.sampled_from(LINKS))
    lines += ["[network]", f'kind = "{kind}"', f'bandwidth = "{bw}"', f'latency = "{lat}"']
    return "\n".join(lines) + "\n"


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    text=clusters(),
    model=st.sampled_from(MODELS),
    seq=st.sampled_from([None, 128, 256]),
    per_gpu=st.sampled_from([None, 1, 2, 4]),
)
def test_every_ranked_plan_passes_the_launch_preflight(tmp_path_factory, text, model, seq, per_gpu):
    d = tmp_path_factory.mktemp("rt")
    (d / "c.toml").write_text(text)
    cluster = load_cluster(d / "c.toml")
    gb = None if per_gpu is None else per_gpu * cluster.gpu_count
    try:
        rec = advise(
            Request(
                model=model,
                cluster=cluster,
                cluster_ref={"file": str(d / "c.toml")},
                seq_len=seq,
                global_batch=gb,
                top=5,
            )
        )
    except Exception as exc:  # an impossible request is an input error, never something else
        from paradvisor.errors import InputError

        assert isinstance(exc, InputError), exc
        return
    family = family_of(rec.profile)
    for i, e in enumerate(rec.plans):
        assert why_not(e.plan, family) is None
        preset = preset_from_estimate(rec, e, name=f"p{i}")
        lau = preset.launch
        online = [n for n in rec.cluster.online_nodes if n.gpus]
        assert lau.world == e.plan.world_size == sum(n.gpu_count for n in online)
        assert [lau.procs(r) for r in range(lau.nnodes)] == [n.gpu_count for n in online]
        if lau.nnodes > 1:
            assert lau.rdzv_endpoint.startswith(lau.hosts[0] + ":")
        path = save_preset(d / f"p{i}.toml", preset.to_doc(), force=True)
        validate(load_preset(path), reach=False)  # raises InputError if the launcher would refuse it
        assert preset.prediction["step_time_s"] == e.step_time
        assert math.isfinite(preset.prediction["memory_per_gpu_bytes"])
    for item in rec.plan_only:
        assert why_not(type(rec.plans[0].plan).from_dict(item["plan"]), family) if rec.plans else True


def test_a_ranked_diloco_plan_holds_whole_rounds(tmp_path):
    """Two nodes over a WAN rank DiLoCo with 100 local steps: the preset runs whole rounds of them (its 20
    default steps were refused: 'local_steps 100 is more than train.steps 20'), and the launcher accepts it."""
    (tmp_path / "c.toml").write_text(
        'name = "wan"\n[[node]]\nname = "n0"\ngpus = [{ type = "H100 SXM", count = 1 }]\n[[node]]\nname = "n1"\n'
        'gpus = [{ type = "H100 SXM", count = 1 }]\n[network]\nkind = "wan"\nbandwidth = "1 Gbit/s"\n'
        'latency = "30 ms"\n'
    )
    rec = advise(Request(model="gpt-mini", cluster=load_cluster(tmp_path / "c.toml"), top=5))
    diloco = [e for e in rec.plans if e.plan.diloco]
    assert diloco
    for i, e in enumerate(diloco):
        preset = preset_from_estimate(rec, e, {"file": str(tmp_path / "c.toml")}, name=f"d{i}")
        assert preset.train.steps % (e.plan.local_steps or e.plan.nodes[0].local_steps) == 0
        validate(load_preset(save_preset(tmp_path / f"d{i}.toml", preset.to_doc())), reach=False)
