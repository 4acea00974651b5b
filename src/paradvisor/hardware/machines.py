"""The machines a question is about, resolved one way for every command and the TUI.

A user names machines as a cluster file (`--cluster FILE`), as N GPUs of one type (`--gpus N --gpu-type NAME
[--link KIND]`), as hosts probed over ssh (`detect --host`, the TUI's "Add host"), or not at all (this machine,
detected). `resolve_machines` turns any of them into a `Cluster` and a `ClusterRef`: how a saved preset and a
recommendation name those machines again (the preset's `[cluster]` table, `ClusterRef.to_doc()`).
"""

from __future__ import annotations

import os
from dataclasses import fields

from paradvisor.errors import InputError
from paradvisor.hardware import catalog
from paradvisor.hardware.cluster import cluster_from_nodes, load_cluster, single_node_cluster
from paradvisor.hardware.types import Cluster
from paradvisor.record import record


@record(frozen=True)
class ClusterRef:
    """Where a cluster came from. Exactly one way is set: `file`, `gpus` + `gpu_type` (+ `link`), `hosts`, or
    `local`. `to_doc()` is the preset's `[cluster]` table (only the keys that are set)."""

    file: str | None = None
    gpus: int | None = None
    gpu_type: str | None = None
    link: str | None = None
    local: bool = False
    hosts: tuple[str, ...] = ()

    def to_doc(self) -> dict:
        doc: dict = {}
        for f in fields(self):
            v = getattr(self, f.name)
            if v is None or v is False or v == ():
                continue
            doc[f.name] = list(v) if f.name == "hosts" else v
        return doc

    @classmethod
    def from_doc(cls, doc: dict) -> ClusterRef:
        """The reference a preset's `[cluster]` table holds (its keys are checked by the preset reader)."""
        known = {f.name for f in fields(cls)}
        kw = {k: v for k, v in doc.items() if k in known}
        if "hosts" in kw:
            kw["hosts"] = tuple(kw["hosts"])
        return cls(**kw)


def resolve_machines(
    *,
    cluster_file: str | None = None,
    gpus: int | None = None,
    gpu_type: str | None = None,
    link: str | None = None,
    gpu_spec: list[str] | None = None,
    hosts: list[str] | None = None,
    local: bool = True,
    ssh_config: str | None = None,
    ssh_timeout: float = 10.0,
    file_ref: str | None = None,
) -> tuple[Cluster, ClusterRef]:
    """The cluster the options name, and how to name it again. `gpu_spec`: extra GPU definition files (the
    catalogue's `--gpu-spec`); `hosts`: probe each over ssh, besides this machine unless `local` is False;
    `file_ref`: how the reference names the cluster file (default: relative to the working directory)."""
    if gpu_spec is not None:
        catalog.use_gpu_specs(gpu_spec)
    catalog.gpus()  # a broken user catalogue or --gpu-spec file fails here, naming its file and line
    if cluster_file and (gpus is not None or gpu_type):
        raise InputError("give either --cluster or --gpus/--gpu-type, not both")
    if cluster_file and hosts:
        raise InputError("give either --cluster or --host, not both")
    if cluster_file:
        return load_cluster(cluster_file), ClusterRef(file=file_ref or os.path.relpath(cluster_file))
    if gpus is not None or gpu_type:
        if gpus is None or not gpu_type:
            raise InputError("--gpus and --gpu-type go together (e.g. --gpus 8 --gpu-type 'H100 SXM')")
        c = single_node_cluster(gpu_type, gpus, link=link)
        return c, ClusterRef(
            gpus=gpus, gpu_type=c.nodes[0].gpus[0].spec.name, link=c.nodes[0].intra_link.kind
        )
    nodes = []
    if local or not hosts:
        from paradvisor.hardware.inventory import detect_local  # noqa: PLC0415 - start-up: `paradvisor recommend` does not load it

        nodes.append(detect_local())
    if hosts:
        from paradvisor.hardware.remote import probe_hosts  # noqa: PLC0415 - start-up: `paradvisor recommend` does not load it

        nodes.extend(probe_hosts(hosts, timeout=ssh_timeout, ssh_config=ssh_config))
        return cluster_from_nodes(nodes, name="detected"), ClusterRef(
            hosts=tuple(n.host or n.name for n in nodes)
        )
    return cluster_from_nodes(nodes, name=nodes[0].name), ClusterRef(local=True)


def with_host(cluster: Cluster | None, node) -> tuple[Cluster, ClusterRef]:
    """`cluster` with one more probed node (the TUI's "Add host"), and its reference: the hosts probed."""
    nodes = list(cluster.nodes) if cluster else []
    return cluster_from_nodes(nodes + [node], name="detected"), ClusterRef(
        hosts=tuple(n.host or n.name for n in nodes + [node])
    )
