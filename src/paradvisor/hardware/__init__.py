"""Facts about machines: the GPU catalog, the local NVML/psutil probe, the ssh probe of remote
nodes, and cluster files describing machines one plans for."""
