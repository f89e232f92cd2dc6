"""The recorded measurements as Markdown tables (``python -m validate.measure --report``).

Reads only the JSON file: no torch needed. GB = 10^9 bytes; B/param divides by the model's
parameters, or for FSDP2 by one rank's share of them (N/dp).
"""

from __future__ import annotations

from pathlib import Path

DEFAULT = Path(__file__).resolve().parents[2] / "docs" / "_data" / "measurements.json"
SHORT = {"parameters": "params", "reference weights": "ref", "master weights": "master", "gradients": "grads",
         "optimizer states": "Adam", "step counters": "steps",
         "FSDP gathered parameters": "gathered", "FSDP reduce-scatter buffers": "RS bufs",
         "logits": "logits", "weight copies": "wcopies", "activations": "acts",
         "temporaries": "temps"}


def gb(n: int) -> str:
    return f"{n / 1e9:.3f}"


def _recipe(c: dict) -> str:
    r = c["recipe"] + (" foreach" if c["optimizer"]["foreach"] else "")
    return r + (f" dp{c['dp']} r{c['rank']}" if c["dp"] > 1 else "")


def _per_param(c: dict) -> float:
    return c["measured"]["parameters_count"] / c["dp"]


def _alive(alive: dict, per: float) -> str:
    return ", ".join(f"{SHORT.get(k, k)} {v / 1e9:.2f}" for k, v in alive.items() if v >= 1e6)


def render(doc: dict) -> str:
    configs = doc["configurations"]
    steps = [c for c in configs if c["kind"] == "step"]
    saved = [c for c in configs if c["kind"] == "saved"]
    v = doc["versions"]
    out = [f"Measured {doc['date']} with torch {v['torch']}, transformers {v['transformers']}, "
           f"Python {v['python']}. GB = 10^9 bytes.", ""]

    out += ["### Model states after an AdamW step (second step, before zero_grad)", "",
            "| model | impl | recipe | params GB | grads GB | master GB | Adam GB | total bytes "
            "| B/param p/g/m/o = total | step counters |",
            "|---|---|---|---:|---:|---:|---:|---:|---|---|"]
    for c in steps:
        st, per = c["measured"]["states"], _per_param(c)
        split = "/".join(f"{st[k] / per:.2f}".rstrip("0").rstrip(".") for k in
                         ("parameters", "gradients", "master_weights", "optimizer_states"))
        sc = st["step_counters"]
        out.append(f"| {c['model']} | {c['implementation']} | {_recipe(c)} | "
                   f"{gb(st['parameters'])} | {gb(st['gradients'])} | {gb(st['master_weights'])} | "
                   f"{gb(st['optimizer_states'])} | {st['total']:,} | "
                   f"{split} = {st['total'] / per:.3f} | {sc['count']} × {'/'.join(sc['dtype'])} "
                   f"= {sc['bytes']} B |")

    out += ["", "### Bytes saved for backward, one micro-batch (b = 1)", "",
            "| model | impl | precision | s | per layer GB | of which weight copies | "
            "whole model, bytes | embedding + output + shared GB | × reference-sdpa bf16 |",
            "|---|---|---|---:|---:|---:|---:|---:|---:|"]
    base = {(c["model"], c["s"]): c["measured"]["total"] for c in saved
            if c["implementation"] == "reference-sdpa" and c["precision"] == "bf16"}
    for c in saved:
        m = c["measured"]
        layer = m["per_layer"][m["layer_shown"]]
        rest = m["embedding"] + m["output"] + m["shared"]
        out.append(f"| {c['model']} | {c['implementation']} | {c['precision']} | {c['s']} | "
                   f"{gb(layer)} | {gb(m['layer_weight_copies'])} | {m['total']:,} | "
                   f"{gb(rest)} | {_ratio(m['total'], base.get((c['model'], c['s'])))} |")

    out += ["", "### Peak over a whole training step (steady state: the second step)", "",
            "| model | impl | recipe | peak, bytes | B/param | phase | after op | alive at the peak, "
            "GB | first step: GB, phase |",
            "|---|---|---|---:|---:|---|---|---|---|"]
    for c in steps:
        m, per = c["measured"], _per_param(c)
        p, f = m["peak"], m["first_step_peak"]
        out.append(f"| {c['model']} | {c['implementation']} | {_recipe(c)} | {p['bytes']:,} | "
                   f"{p['bytes'] / per:.2f} | {p['phase']} | {p['op']} | "
                   f"{_alive(p['alive'], per)} | {gb(f['bytes'])}, {f['phase']} |")
    post = [c for c in configs if c["kind"] in ("dpo-step", "logprob-pass")]
    out += ["", "### Post-training: a DPO step, a GRPO/PPO log-prob pass (post_training.py)", "",
            "| kind | model | recipe | order / logits | s | b | peak, bytes | phase | "
            "reference pass / parts, GB | alive at the peak, GB |",
            "|---|---|---|---|---:|---:|---:|---|---|---|"]
    for c in post:
        m = c["measured"]
        p = m["peak"]
        if c["kind"] == "dpo-step":
            how, extra = c["dpo"]["order"], gb(m["reference_pass"]["bytes"])
        else:
            how = c["logprob"]["logits_dtype"]
            extra = ", ".join(f"{k} {gb(v)}" for k, v in m["parts"].items())
        out.append(f"| {c['kind']} | {c['model']} | {c['recipe']} | {how} | {c['s']} | {c['b']} "
                   f"| {p['bytes']:,} | {p['phase']} | {extra} | {_alive(p['alive'], 1)} |")
    return "\n".join(out)


def _ratio(total: int, base: int | None) -> str:
    """× the reference model's bytes; "n/a" where there is none (Mixtral: Hugging Face only)."""
    return "n/a" if base is None else f"{total / base:.2f}"
