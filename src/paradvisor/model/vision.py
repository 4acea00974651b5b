"""Layer-list profiles of convolutional networks (VGG), from a small TOML description."""

from __future__ import annotations

from paradvisor.model.profile import LayerEntry, ModelProfile


def vgg_profile(spec: dict) -> ModelProfile:
    c, hgt, wid = spec["input"]
    layers: list[LayerEntry] = []
    block, idx, in_c = 1, 1, c
    for item in spec["features"]:
        if item == "M":
            hgt, wid = hgt // 2, wid // 2
            layers.append(
                LayerEntry(
                    f"pool{block}", "pool", 0, out_elems=in_c * hgt * wid, fwd_flops=in_c * hgt * wid * 4
                )
            )
            block, idx = block + 1, 1
            continue
        out_c = int(item)
        params = in_c * out_c * 9 + out_c
        layers.append(
            LayerEntry(
                f"conv{block}_{idx}",
                "conv",
                params,
                out_elems=out_c * hgt * wid,
                fwd_flops=2 * 9 * in_c * out_c * hgt * wid,
            )
        )
        in_c, idx = out_c, idx + 1
    ah, aw = spec.get("avgpool", [7, 7])
    in_f = in_c * ah * aw
    widths = list(spec["classifier"]) + [spec["classes"]]
    for k, out_f in enumerate(widths):
        layers.append(
            LayerEntry(
                f"fc{6 + k}", "linear", in_f * out_f + out_f, out_elems=out_f, fwd_flops=2 * in_f * out_f
            )
        )
        in_f = out_f
    total = sum(e.params for e in layers)
    return ModelProfile(
        name=spec["name"],
        architecture="VGG",
        source="builtin",
        total_params=total,
        trainable_params=total,
        layers=tuple(layers),
        description=spec.get("description", ""),
        provenance=spec.get("source", ""),
        input_shape=(c, *spec["input"][1:]),
    )
