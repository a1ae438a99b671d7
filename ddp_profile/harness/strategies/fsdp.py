"""`fsdp`: PyTorch's fully sharded data parallel, FSDP2 (`torch.distributed.fsdp.fully_shard`), as the
reference for parameter + gradient + optimizer-state sharding.

Units. `fully_shard` is applied to each Transformer block (`module.layers[i]`) and then to the root, which
takes what is left (embedding, final norm, LM head). For the MLP every `nn.Linear` is its own unit and the
root has none left: one unit per layer is what lets the next layer's all-gather run under this layer's
compute (a root-only MLP would gather all 8 layers at once, leaving nothing to overlap); any other model
(the tests' toy) is sharded at the root only. Each unit's parameters become DTensors sharded on dim 0
over a 1-D mesh of all ranks; gradients are reduce-scattered into the same shards (FSDP2 divides by the
world size, so they are means), and the optimizer, built over `self.module.parameters()` after wrapping,
keeps state only for the local shard.

Options: `reshard_after_forward` (default True; `--fsdp-no-reshard` keeps gathered parameters from
forward to backward: one all-gather per unit per step instead of two, more memory) and
`param_dtype="bf16"` (`--fsdp-param-dtype bf16`): `MixedPrecisionPolicy(param_dtype=bf16,
reduce_dtype=fp32)`, i.e. bf16 all-gathers and compute, fp32 gradient reduce-scatter and fp32 master
shards.

NVTX. FSDP2 issues its all-gathers and reduce-scatters from inside its own pre/post forward and backward
hooks and its root's end-of-backward callback (C++ collectives on separate streams), and offers no hook
around the individual collective launches; wrapping them would mean patching private functions, so there
are no `allreduce`-style collective ranges for this strategy. In a trace its NCCL kernels are named
(AllGather / ReduceScatter) and carry their own sizes. What the harness adds is honest structure: a
`fsdp block <i>` range (payload = unit index) around each unit's forward, opened by a forward pre-hook
that runs *before* FSDP2's own (so it covers the unit's all-gather wait, compute and reshard) and closed by
a forward hook that runs after FSDP2's. Backward has no such ranges (full backward hooks would wrap the
units' inputs and outputs in extra autograd nodes). The root unit is not given a range: its forward is the
whole model. `finish_gradient_synchronization()` has nothing to wait for: FSDP2's root callback has
already made the reduce-scattered gradients ready before `loss.backward()` returns.

Needs an initialised process group (torchrun, or `--nproc N` for gloo on the CPU; FSDP2 runs on a CPU
device mesh with gloo, which is how the tests check it).
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn

from ddp_profile.errors import ConfigError
from ddp_profile.harness import nvtx_ranges
from ddp_profile.harness.strategies.base import Wrapper, layout_from_groups


def shard_units(module: nn.Module) -> list[nn.Module]:
    """The submodules that become their own FSDP units (the root is always one more)."""
    layers = getattr(module, "layers", None)
    if isinstance(layers, nn.ModuleList):  # the Transformer: one unit per block
        return list(layers)
    net = getattr(module, "net", None)
    if isinstance(net, nn.Sequential):  # the MLP: one unit per Linear
        return [m for m in net if isinstance(m, nn.Linear)]
    return []


def _pre_hook(index: int):
    def hook(_module, _args) -> None:
        nvtx_ranges.fsdp_block(index)

    return hook


def _post_hook(_module, _args, _output) -> None:
    nvtx_ranges.pop()


class FSDP(Wrapper):
    name = "fsdp"

    def __init__(
        self, module: nn.Module, reshard_after_forward: bool = True, param_dtype: str = "fp32"
    ) -> None:
        if not (dist.is_available() and dist.is_initialized()):
            raise ConfigError("strategy fsdp needs a process group: run it under torchrun or with --nproc N")
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        super().__init__(module)  # rank 0's values everywhere before sharding: each rank keeps its slice
        self.reshard_after_forward = reshard_after_forward
        self.param_dtype = param_dtype
        first = next(module.parameters())
        mesh = init_device_mesh(first.device.type, (self.world_size,))
        policy = (
            MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
            if param_dtype == "bf16"
            else MixedPrecisionPolicy()
        )
        units = shard_units(module)
        # Unsharded gradient groups per unit, for layout(): recorded before the parameters become DTensors.
        in_units = {id(p) for u in units for p in u.parameters()}
        groups = [[p for p in u.parameters() if p.requires_grad] for u in units]
        root = [p for p in module.parameters() if p.requires_grad and id(p) not in in_units]
        self._layout = layout_from_groups(module, [g for g in [*groups, root] if g])
        for index, unit in enumerate(units):
            fully_shard(unit, mesh=mesh, reshard_after_forward=reshard_after_forward, mp_policy=policy)
            # FSDP2 prepends its pre-hook and appends its post-hook; prepending ours after it makes ours run
            # first, appending ours makes it run last, so the range encloses both of FSDP2's hooks.
            unit.register_forward_pre_hook(_pre_hook(index), prepend=True)
            unit.register_forward_hook(_post_hook)
        fully_shard(module, mesh=mesh, reshard_after_forward=reshard_after_forward, mp_policy=policy)

    def layout(self) -> dict:
        """FSDP units as buckets: unsharded gradient bytes per unit (each unit's reduce-scatter input)."""
        return {
            **self._layout,
            "units": "per block + root" if self._layout["buckets"] > 1 else "root",
            "reshard_after_forward": self.reshard_after_forward,
            "param_dtype": self.param_dtype,
        }


__all__ = ["FSDP", "shard_units"]
