"""trainmath.memory.sharding against PyTorch's FSDP2 (``fully_shard``), rank by rank, on the CPU.

A small transformer-shaped model (uneven dim-0 sizes, so shards pad and one comes out empty) is
sharded with ``torch.distributed.fsdp.fully_shard`` under a fake process group, one rank at a
time in this process; it runs one forward, backward and optimizer step. For every rank the test
counts the bytes of the storages behind the sharded parameters, their gradients and the
optimizer state, and of each unit's unsharded parameters while it computes, and asserts they
equal :func:`trainmath.memory.fsdp2.fsdp2_rank` exactly.

The measurements are also compared with the committed docs/_data/fsdp-check.json, which the
ZeRO and FSDP page reads. After a deliberate change, refresh it with

    TRAINMATH_REFRESH_FSDP_CHECK=1 make validate
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
import torch.distributed as dist  # noqa: E402
from torch import nn  # noqa: E402
from torch.distributed.device_mesh import init_device_mesh  # noqa: E402
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard  # noqa: E402
from torch.distributed.tensor import DTensor  # noqa: E402
from torch.testing._internal.distributed.fake_pg import FakeStore  # noqa: E402

from trainmath.memory.fsdp2 import fsdp2_rank  # noqa: E402

RESULTS = Path(__file__).resolve().parents[1] / "docs" / "_data" / "fsdp-check.json"
REFRESH = "TRAINMATH_REFRESH_FSDP_CHECK"

# Sizes chosen so dim 0 rarely divides the shard group: vocab 11, hidden 8, MLP 13, classes 5.
VOCAB, HIDDEN, FFN, CLASSES, LAYERS = 11, 8, 13, 5, 2

SCENARIOS = [
    # name, FSDP1 name, world size, shard group, precision, optimizer
    ("full-shard-fp32-adamw", "FULL_SHARD", 4, 4, "fp32", "adamw"),
    ("full-shard-bf16-mixed-adamw", "FULL_SHARD", 4, 4, "bf16-mixed", "adamw"),
    ("shard-grad-op-fp32-sgd-momentum", "SHARD_GRAD_OP", 3, 3, "fp32", "sgd-momentum"),
    ("hybrid-shard-fp32-adam", "HYBRID_SHARD", 6, 3, "fp32", "adam"),
]


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(HIDDEN)
        self.up = nn.Linear(HIDDEN, FFN)
        self.down = nn.Linear(FFN, HIDDEN, bias=False)

    def forward(self, x):
        return x + self.down(torch.relu(self.up(self.norm(x))))


class Tiny(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, HIDDEN)
        self.blocks = nn.ModuleList(Block() for _ in range(LAYERS))
        self.norm = nn.LayerNorm(HIDDEN)
        self.head = nn.Linear(HIDDEN, CLASSES)

    def forward(self, tokens):
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


def _units(model: Tiny) -> list[tuple[str, nn.Module, list[str]]]:
    """The fully_shard units in the order the library lists them: each block, then the root."""
    units = [(f"blocks.{i}", b, [f"blocks.{i}.{n}" for n, _ in b.named_parameters()])
             for i, b in enumerate(model.blocks)]
    root = [n for n, _ in model.named_parameters() if not n.startswith("blocks.")]
    return units + [("root", model, root)]


def _storage_bytes(tensors) -> int:
    """Bytes of the distinct storages behind ``tensors`` (DTensors count their local shard)."""
    seen: dict[int, int] = {}
    for t in tensors:
        local = t.to_local() if isinstance(t, DTensor) else t
        storage = local.untyped_storage()
        if storage.nbytes():
            seen[storage.data_ptr()] = storage.nbytes()
    return sum(seen.values())


def _measure_rank(rank: int, strategy: str, world: int, group: int, precision: str, optimizer: str):
    dist.init_process_group("fake", rank=rank, world_size=world, store=FakeStore())
    try:
        torch.manual_seed(0)
        model = Tiny()
        kwargs: dict = {"reshard_after_forward": strategy != "SHARD_GRAD_OP"}
        if strategy == "HYBRID_SHARD":
            kwargs["mesh"] = init_device_mesh("cpu", (world // group, group),
                                              mesh_dim_names=("replicate", "shard"))
        if precision == "bf16-mixed":
            kwargs["mp_policy"] = MixedPrecisionPolicy(param_dtype=torch.bfloat16,
                                                       reduce_dtype=torch.float32)
        units = _units(model)
        gathered: dict[str, int] = {}
        for name, module, names in units:
            if module is not model:
                fully_shard(module, **kwargs)
        fully_shard(model, **kwargs)
        for name, module, names in units:
            prefix = "" if module is model else f"{name}."

            def pre_hook(mod, args, name=name, names=set(names), prefix=prefix):
                own = [p for n, p in mod.named_parameters() if prefix + n in names]
                gathered[name] = _storage_bytes(p for p in own if not isinstance(p, DTensor))
            module.register_forward_pre_hook(pre_hook)
        if optimizer in ("adam", "adamw"):
            opt_cls = torch.optim.Adam if optimizer == "adam" else torch.optim.AdamW
            opt = opt_cls(model.parameters(), lr=1e-3)
        else:
            opt = torch.optim.SGD(model.parameters(), lr=1e-2, momentum=0.9)
        out = model(torch.randint(0, VOCAB, (12,)))  # 1-D: outputs are not views
        held = _storage_bytes(p for p in model.parameters() if not isinstance(p, DTensor))
        out.float().sum().backward()
        opt.step()
        sharded = list(model.parameters())
        assert all(isinstance(p, DTensor) for p in sharded)
        return {
            "rank": rank,
            "shard_rank": rank % group,
            "parameters": _storage_bytes(sharded),
            "gradients": _storage_bytes(p.grad for p in sharded),
            "optimizer_states": _storage_bytes(t for p in sharded for t in opt.state[p].values()),
            "unsharded_units": [gathered[name] for name, _, _ in units],
            "held_after_forward": held,
        }
    finally:
        dist.destroy_process_group()


def _model_units() -> list[list[list[int]]]:
    model = Tiny()
    shapes = {n: list(p.shape) for n, p in model.named_parameters()}
    return [[shapes[n] for n in names] for _, _, names in _units(model)]


def measure() -> dict:
    return {
        "about": "Per-rank bytes under PyTorch FSDP2 (fully_shard) after one optimizer step, "
                 f"measured by validate/test_fsdp.py; refresh with {REFRESH}=1 make validate.",
        "torch": torch.__version__,
        "units": _model_units(),
        "unit_names": [name for name, _, _ in _units(Tiny())],
        "scenarios": [
            {
                "name": name, "strategy": strategy, "world_size": world, "shard_group": group,
                "precision": precision, "optimizer": optimizer,
                "ranks": [_measure_rank(r, strategy, world, group, precision, optimizer)
                          for r in range(world)],
            }
            for name, strategy, world, group, precision, optimizer in SCENARIOS
        ],
    }


@pytest.fixture(scope="module")
def measured() -> dict:
    return measure()


def _scenario_ids():
    return [s[0] for s in SCENARIOS]


@pytest.mark.parametrize("index", range(len(SCENARIOS)), ids=_scenario_ids())
def test_every_rank_matches_the_library_exactly(measured, index):
    scenario = measured["scenarios"][index]
    units = [[tuple(s) for s in unit] for unit in measured["units"]]
    for got in scenario["ranks"]:
        want = fsdp2_rank(units, scenario["shard_group"], got["shard_rank"],
                          scenario["precision"], scenario["optimizer"])
        where = f"{scenario['name']}, rank {got['rank']}"
        assert got["parameters"] == want.parameters.n, where
        assert got["gradients"] == want.gradients.n, where
        assert got["optimizer_states"] == want.optimizer_states.n, where
        assert got["unsharded_units"] == [b.n for b in want.unsharded_units], where
        keeps_gathered = scenario["strategy"] == "SHARD_GRAD_OP"
        held = sum(b.n for b in want.unsharded_units) if keeps_gathered else 0
        assert got["held_after_forward"] == held, where


def test_the_check_exercises_padding_and_empty_shards(measured):
    """The model must make FSDP pad: otherwise the test could not tell padding from none."""
    units = [[tuple(s) for s in unit] for unit in measured["units"]]
    full = [fsdp2_rank(units, 4, r) for r in range(4)]
    assert len({r.optimizer_states.n for r in full}) > 1  # uneven shards
    assert full[-1].numel < full[-1].padded_numel  # the last rank carries padding
    assert any(got["optimizer_states"] != measured["scenarios"][0]["ranks"][0]["optimizer_states"]
               for got in measured["scenarios"][0]["ranks"])


def test_committed_results_are_current(measured):
    if os.environ.get(REFRESH):
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text(json.dumps(measured, indent=1) + "\n")
    assert RESULTS.exists(), f"{RESULTS} is missing; create it with {REFRESH}=1 make validate"
    committed = json.loads(RESULTS.read_text())
    strip = lambda d: {k: v for k, v in d.items() if k != "torch"}  # noqa: E731
    assert strip(committed) == strip(measured), (
        f"{RESULTS.relative_to(RESULTS.parents[2])} differs from what torch {torch.__version__} "
        f"measures now (committed with torch {committed.get('torch')}). If the change is "
        f"expected, refresh it with {REFRESH}=1 make validate and commit the file"
    )
