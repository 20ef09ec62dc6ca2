"""Deliberate faults for the mutation run: each a small textual patch to `strategy/` or `xlasim/`.

Every edit names a file and an exact old -> new string. The old string must occur exactly once
in that file, or applying the mutant fails loudly (`MutantDoesNotApply`): a mutant whose code was
rewritten must be updated, not silently skipped (tests/mutation/test_mutants.py checks this on
every run of the suite). Each mutant is a bug the suite should catch; most are real bugs of XLA
training strategies (see docs/known-bugs.md), the rest classic slips in collectives.
"""

from __future__ import annotations

from events_mutants import EVENTS_MUTANTS
from machines_mutants import MACHINES_MUTANTS
from mutant import Edit, Mutant, MutantDoesNotApply, mutant
from races_mutants import RACES_MUTANTS
from tpu_mutants import TPU_MUTANTS
from traces_mutants import TRACES_MUTANTS

__all__ = ["MUTANTS", "SANITY", "Edit", "Mutant", "MutantDoesNotApply"]


#: Proves the run imports the copy's packages (the venv has the working tree installed
#: editable): both must fail the run, with their message in its output. Not scored.
SANITY = (
    mutant(
        "sanity-strategy-import",
        "the copy's strategy package is the one imported",
        "strategy/__init__.py",
        '"""A reference XLA training strategy',
        'raise ImportError("sanity mutant: the copy\'s strategy was imported")\n"""A reference XLA training strategy',
    ),
    mutant(
        "sanity-xlasim-import",
        "the copy's xlasim package (and pytest plugin) is the one imported",
        "xlasim/__init__.py",
        '"""xlasim: an emulated multi-core XLA slice',
        'raise ImportError("sanity mutant: the copy\'s xlasim was imported")\n"""xlasim: an emulated multi-core XLA slice',
    ),
)

MUTANTS = (
    # ------------------------------------------------------------------ xlasim: the collectives
    mutant(
        "reduce-drops-last-rank",
        "a collective that drops a rank's contribution",
        "xlasim/emulation/collectives/_reduction.py",
        "for value in values[1:]:",
        "for value in values[1:-1]:",
    ),
    mutant(
        "reduce-max-is-min",
        "the wrong reduce op in the emulator",
        "xlasim/emulation/collectives/_reduction.py",
        "REDUCE_MAX: lambda acc, x: torch.maximum(acc, x, out=acc),",
        "REDUCE_MAX: lambda acc, x: torch.minimum(acc, x, out=acc),",
    ),
    mutant(
        "scale-ignored",
        "all_reduce/reduce_scatter ignore `scale`",
        "xlasim/emulation/collectives/_reduction.py",
        "    if scale != 1.0:",
        "    if False:",
    ),
    mutant(
        "all-gather-reversed",
        "all_gather concatenates in the wrong order",
        "xlasim/emulation/collectives/all_gather.py",
        "return [torch.cat(column, dim) for column, dim in zip(zip(*payloads), dims)]",
        "return [torch.cat(column[::-1], dim) for column, dim in zip(zip(*payloads), dims)]",
    ),
    mutant(
        "reduce-scatter-wrong-shard",
        "reduce_scatter gives each member another member's shard",
        "xlasim/emulation/collectives/reduce_scatter.py",
        "shards.append(reduced.split(reduced.size(dim) // shard_count, dim))",
        "shards.append(reduced.split(reduced.size(dim) // shard_count, dim)[::-1])",
    ),
    mutant(
        "all-to-all-wrong-piece",
        "all_to_all sends piece j to the wrong member",
        "xlasim/emulation/collectives/all_to_all.py",
        "return [torch.cat([piece[j] for piece in pieces], concat_dim) for j in range(split_count)]",
        "return [torch.cat([piece[-1 - j] for piece in pieces], concat_dim) for j in range(split_count)]",
    ),
    mutant(
        "permute-inverted",
        "collective_permute sends along the pairs backwards",
        "xlasim/emulation/collectives/collective_permute.py",
        "received[target] = payloads[source][0]",
        "received[source] = payloads[target][0]",
    ),
    mutant(
        "broadcast-ignores-root",
        "collective_broadcast ignores root_ordinal",
        "xlasim/emulation/collectives/collective_broadcast.py",
        "    return [t.clone() for t in payloads[root_index]]",
        "    return [t.clone() for t in payloads[0]]",
    ),
    mutant(
        "replica-groups-ignored",
        "collectives run over the whole world whatever the replica groups",
        "xlasim/emulation/collectives/_arguments.py",
        "    if normalized is None:\n        return tuple(range(size))",
        "    if True:\n        return tuple(range(size))",
    ),
    mutant(
        "reduction-out-of-rank-order",
        "reductions combine the ranks last to first: results differ in their last bits from a TPU's",
        "xlasim/emulation/collectives/_reduction.py",
        "    acc = values[0].clone()\n    for value in values[1:]:\n        combine(acc, value)",
        "    acc = values[-1].clone()\n    for value in values[-2::-1]:\n        combine(acc, value)",
    ),
    # ------------------------------------------------------------------ xlasim: the rendezvous
    mutant(
        "signature-check-skipped",
        "ranks that meet with different ops, shapes or dtypes are combined as if they matched",
        "xlasim/emulation/rendezvous.py",
        "    if all((c.op, c.signature) == (first.op, first.signature) for c in calls.values()):",
        "    if True:",
    ),
    mutant(
        "stranded-slot-detection-removed",
        "a collective that a returned rank can never join is not recognised as a skipped collective",
        "xlasim/emulation/rendezvous.py",
        "            if gone and not slot.complete:",
        "            if False:",
    ),
    mutant(
        "abort-not-released",
        "a rank that raises no longer aborts the run: its peers wait on without being told why",
        "xlasim/emulation/rendezvous.py",
        "            if outcome.raised:\n                self._abort(outcome.error)  # type: ignore[arg-type]\n",
        "",
    ),
    # ------------------------------------------------------------------ xlasim: the pytest plugin
    mutant(
        "settle-picks-the-wrong-rank",
        "a test whose ranks fail differently reports the highest failing rank's exception",
        "xlasim/pytest_plugin/reporting/outcomes.py",
        "        raise failing[0].error  # type: ignore[misc]",
        "        raise failing[-1].error  # type: ignore[misc]",
    ),
    mutant(
        "inconsistent-skips-accepted",
        "a skip taken by some ranks only is reported as the test's skip (a TPU slice would hang)",
        "xlasim/pytest_plugin/reporting/outcomes.py",
        "    if len(left) == len(outcomes) and len(kinds) == 1:",
        "    if len(kinds) == 1:",
    ),
    # ------------------------------------------------------------------ strategy: collectives
    mutant(
        "strategy-reduce-max-is-min",
        "the wrong reduce op in strategy.reduce",
        "strategy/collectives.py",
        '"max": (xm.REDUCE_MAX, False),',
        '"max": (xm.REDUCE_MIN, False),',
    ),
    mutant(
        "strategy-mean-is-sum",
        "mean computed as a sum",
        "strategy/collectives.py",
        "scale = 1.0 / xr.world_size() if mean else 1.0",
        "scale = 1.0",
    ),
    mutant(
        "strategy-reduce-result-on-the-rank-device",
        "reduce hands back a tensor on another device than the input's (Lightning PR #18275)",
        "strategy/collectives.py",
        "return xm.all_reduce(reduce_type, value, scale=scale).to(tensor.device)",
        "return xm.all_reduce(reduce_type, value, scale=scale)",
    ),
    Mutant(
        "strategy-broadcast-ignores-src",
        "broadcast ignores `src` (Lightning PR #17408)",
        (
            Edit(
                "strategy/strategy.py",
                "return collectives.broadcast_tensor(obj, src, self.root_device)",
                "return collectives.broadcast_tensor(obj, 0, self.root_device)",
            ),
            Edit(
                "strategy/strategy.py",
                "return collectives.broadcast_object(obj, src, self.root_device)",
                "return collectives.broadcast_object(obj, 0, self.root_device)",
            ),
        ),
    ),
    mutant(
        "gradients-not-reduced",
        "optimizer_step steps on each replica's own gradients: replicas diverge",
        "strategy/strategy.py",
        "        xm.reduce_gradients(optimizer)\n",
        "",
    ),
    mutant(
        "module-states-not-synced",
        "replicas start from their own initial weights",
        "strategy/strategy.py",
        "if self.sync_module_states and self.world_size > 1:",
        "if False:",
    ),
    # ------------------------------------------------------------------ strategy: ranks
    mutant(
        "sampler-local-rank",
        "the sampler shards by local rank (Lightning #16802)",
        "strategy/strategy.py",
        'return {"num_replicas": self.world_size, "rank": self.global_rank}',
        'return {"num_replicas": self.world_size, "rank": self.local_rank}',
    ),
    mutant(
        "global-zero-is-local-zero",
        "'global rank 0' checks the local rank: one writer per host (Lightning #16843)",
        "strategy/strategy.py",
        "        return self.global_rank == 0",
        "        return self.local_rank == 0",
    ),
    # ------------------------------------------------------------------ strategy: data
    mutant(
        "sampler-off-by-one-rank",
        "the inserted DistributedSampler is given the next rank",
        "strategy/sampling.py",
        "dataset, num_replicas=num_replicas, rank=rank, shuffle=shuffle, seed=seed",
        "dataset, num_replicas=num_replicas, rank=(rank + 1) % num_replicas, shuffle=shuffle, seed=seed",
    ),
    mutant(
        "stream-shard-off-by-one",
        "iterable datasets: every replica takes its neighbour's item",
        "strategy/sampling.py",
        "yield group[self.rank]",
        "yield group[(self.rank + 1) % self.num_replicas]",
    ),
    mutant(
        "sampler-not-set-epoch",
        "set_epoch never reaches the sampler: the same order every epoch",
        "strategy/sampling.py",
        "        sampler.set_epoch(epoch)",
        "        pass",
    ),
    mutant(
        "loader-wrapped-twice",
        "process_dataloader wraps an already wrapped loader again (Lightning PR #16571)",
        "strategy/sampling.py",
        "    if isinstance(loader, MpDeviceLoader):\n        return loader\n    wrapped =",
        "    wrapped =",
    ),
    # ------------------------------------------------------------------ strategy: tying
    mutant(
        "retie-skipped",
        "tied weights are not re-tied after the move (Lightning #2705)",
        "strategy/tying.py",
        "    module.to(device=device, dtype=dtype)\n    retie(module, groups)\n",
        "    module.to(device=device, dtype=dtype)\n",
    ),
    # ------------------------------------------------------------------ strategy: checkpoints
    mutant(
        "save-on-every-rank",
        "every rank writes the checkpoint (Lightning #2700, #6230)",
        "strategy/strategy.py",
        "        if self.is_global_zero:\n            try:",
        "        if True:\n            try:",
    ),
    mutant(
        "load-without-rank-zero",
        "every rank reads the file itself: ranks disagree about the checkpoint (Lightning #14343)",
        "strategy/strategy.py",
        "data = self._on_global_zero(lambda: self.checkpoint_io.read_bytes(filepath))",
        "data = self.checkpoint_io.read_bytes(filepath)",
    ),
    Mutant(
        "checkpoint-not-atomic",
        "the checkpoint is written in place: a failed save destroys the previous one",
        (
            Edit(
                "strategy/serialization.py",
                'with open(temporary, "wb") as file:',
                'with open(path, "wb") as file:',
            ),
            Edit("strategy/serialization.py", "        os.replace(temporary, path)\n", ""),
        ),
    ),
    mutant(
        "checkpoint-not-moved-to-cpu",
        "device tensors are saved as they are (pytorch/xla #7123)",
        "strategy/serialization.py",
        "    host = tensor.detach().cpu()",
        "    host = tensor.detach()",
    ),
    mutant(
        "launcher-every-rank-writes-results",
        "every rank writes the launch's results file (a launcher race)",
        "strategy/launching.py",
        "    if strategy.is_global_zero:\n        save_atomic(result",
        "    if True:\n        save_atomic(result",
    ),
    mutant(
        "resume-restarts-the-epoch",
        "resuming forgets how far into the epoch the checkpoint was taken",
        "strategy/trainer.py",
        'checkpoint["global_step"], checkpoint["epoch"], checkpoint["batches_done"]',
        'checkpoint["global_step"], checkpoint["epoch"], 0',
    ),
)

#: The strategy's FSDPv2 (SPMD) mode (issue 17), caught by tests/properties/test_spmd_properties.py.
SPMD_MUTANTS = (
    mutant(
        "spmd-batch-on-model-axis",
        "batches are split along the mesh's model axis instead of fsdp (wrong mesh axis)",
        "strategy/spmd.py",
        "    return (MESH_AXES[0],) + (None,) * (tensor.dim() - 1)",
        "    return (MESH_AXES[1],) + (None,) * (tensor.dim() - 1)",
    ),
    mutant(
        "spmd-batch-split-along-last-dim",
        "batches are split along their last dimension (wrong partition spec)",
        "strategy/spmd.py",
        "    return (MESH_AXES[0],) + (None,) * (tensor.dim() - 1)",
        "    return (None,) * (tensor.dim() - 1) + (MESH_AXES[0],)",
    ),
    mutant(
        "spmd-mesh-axes-swapped",
        "the mesh names its axes (model, fsdp): FSDPv2 shards along the axis meant for the model",
        "strategy/spmd.py",
        'MESH_AXES = ("fsdp", "model")',
        'MESH_AXES = ("model", "fsdp")',
    ),
    mutant(
        "spmd-mesh-devices-reversed",
        "the mesh lists the devices backwards: every piece lands on another device",
        "strategy/spmd.py",
        "    return xs.Mesh(np.arange(count), shape, MESH_AXES)",
        "    return xs.Mesh(np.arange(count)[::-1], shape, MESH_AXES)",
    ),
    mutant(
        "spmd-gradient-clip-ignored",
        "the SPMD optimizer step ignores gradient_clip_val",
        "strategy/spmd.py",
        "        if gradient_clip_val is not None:",
        "        if False:",
    ),
    mutant(
        "spmd-save-every-replica",
        "checkpoints use torch_xla's SPMDSavePlanner as is: tensors replicated along the model "
        "axis are dropped from the checkpoint",
        "strategy/spmd.py",
        "                planner=ReplicaZeroSavePlanner(),",
        "                planner=SPMDSavePlanner(),",
    ),
    mutant(
        "spmd-optimizer-not-primed",
        "loading does not prime an optimizer without state: its momentum arrives from the CPU, "
        "whole on every device instead of sharded",
        "strategy/spmd.py",
        '            if not optimizer.state and any(k.startswith("optimizer.state.") for k in stored):',
        "            if False:",
    ),
    mutant(
        "spmd-optimizer-state-keys-as-strings",
        "loading keeps the checkpoint's string keys: the optimizer's state lands under '0', not 0",
        "strategy/spmd.py",
        "        return _keys_like(unflatten_state_dict(template, metadata.planner_data), nested_live)",
        "        return unflatten_state_dict(template, metadata.planner_data)",
    ),
)
MUTANTS = (
    MUTANTS
    + SPMD_MUTANTS
    + TPU_MUTANTS
    + TRACES_MUTANTS
    + EVENTS_MUTANTS
    + MACHINES_MUTANTS
    + RACES_MUTANTS
)
