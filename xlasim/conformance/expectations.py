"""What the runner knows about particular torch_xla tests, beyond what it can see in a run.

Every entry needs a reason someone can check. None of them turns a run into a pass: a known bug
only names a failure whose output matches its signature (another failure stays a failure), and
a file listed as having no collectives must still launch ranks and exit 0.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Explained:
    """A failure with a known cause (an upstream bug, or a documented limit of emulation):
    `signature` must match the output for a failure to be put down to it."""

    signature: str
    reason: str
    link: str


#: Keyed by file (relative to test/) or by pytest test id.
KNOWN_BUGS: dict[str, Explained] = {
    "test_mp_rendezvous.py": Explained(
        signature=r"ValueError: Only global rendezvous is supported",
        reason="rendezvous over half the replicas: torch_xla 2.9 allows only global ones, so it "
        "fails on a TPU too (run_tests.sh no longer runs it)",
        link="https://github.com/pytorch/xla/blob/v2.9.0/torch_xla/core/xla_model.py#L1323",
    ),
    "test_train_mp_mnist_fsdp_with_ckpt.py": Explained(
        # consolidate_sharded_model_checkpoints' assertion when shards are still missing
        signature=r"Expecting \d+ files \(based on metadata in .*\) but got \d+ files",
        reason="rank 0 consolidates the shards before the other ranks finished writing them: "
        "xm.save(master_only=False) has no rendezvous in 2.9",
        link="https://github.com/pytorch/xla/blob/v2.9.0/test/test_train_mp_mnist_fsdp_with_ckpt.py#L293-L300",
    ),
    "eager/test_eager_all_reduce_in_place.py": Explained(
        signature=r"TypeError: 'NoneType' object is not subscriptable",
        reason="asserts one eager execution for an in-place all_reduce, which torch_xla skips "
        "at a world of 1 (it returns the inputs): fails on a one-chip TPU too, and natively on "
        "one CPU device with its gate removed (docs/conformance.md)",
        link="https://github.com/pytorch/xla/blob/v2.9.0/test/eager/test_eager_all_reduce_in_place.py#L28",
    ),
    "benchmarks/test_ragged_paged_attention_benchmark.py": Explained(
        signature=r"max_num_seqs, pages_per_seq = page_indices\.shape",
        reason="the benchmark calls torch.ops.xla.ragged_paged_attention(q, k_pages, v_pages, "
        "kv_lens, page_indices, ...), the earlier signature; 2.9's takes (q, kv_pages, kv_lens, "
        "page_indices, ...), so kv_lens lands in page_indices and the kernel's input check "
        "fails while JAX traces it, before any TPU code: on a TPU too",
        link="https://github.com/pytorch/xla/blob/v2.9.0/test/benchmarks/test_ragged_paged_attention_benchmark.py#L177-L188",
    ),
    "test_torch_distributed_xla_backend.py::XlaBackendTest::test_reduce_scatter_coalesced": (
        Explained(
            # the reduce-scatter torch_xla 2.9 emits, in the HLO the assertion prints
            signature=r"= \(s64\[2\]\{0\}, s64\[5\]\{0\}\) reduce-scatter\(",
            reason="expects a token operand in the coalesced reduce-scatter's HLO, which torch_xla "
            "2.9 folds into the first input instead (TokenHandler): on a TPU too, and natively "
            "on one CPU device with the gate removed (fixtures/reduce_scatter_coalesced_hlo.py)",
            link="https://github.com/pytorch/xla/blob/v2.9.0/test/test_torch_distributed_xla_backend.py#L171-L177",
        )
    ),
    "test_pallas_spmd.py": Explained(
        signature=r"Number of device IDs \(1\) must match mesh size \(0\)",
        reason="two tests build a mesh of (devices // 2, 2) without asking for 2 devices: at "
        "one device its size is 0, on a one-chip TPU too and natively (xs.Mesh(range(1), "
        "(0, 2))); on 8 emulated cores they reach their Pallas kernel (needs TPU)",
        link="https://github.com/pytorch/xla/blob/v2.9.0/test/test_pallas_spmd.py#L86-L90",
    ),
    "pjrt/test_runtime_tpu.py::TestExperimentalPjrtTpu::test_execute_time_metric": Explained(
        signature=r"TypeError: cannot unpack non-iterable NoneType object",
        reason="reads met.metric_data('ExecuteTime') right after .cpu(), but torch_xla records "
        "ExecuteTime in its execution thread after the result can reach the host: a race it "
        "loses now and then, natively too (fixtures/execute_time_after_transfer.py: 57 of 300)",
        link="https://github.com/pytorch/xla/blob/v2.9.0/test/pjrt/test_runtime_tpu.py#L225-L239",
    ),
    "quantized_ops/test_quantized_matmul.py": Explained(
        signature=r"RuntimeError: Check failed: (data\(\)->)?tensor_data",
        reason="an int4 test before it failed (needs TPU) and pytest's traceback keeps its "
        "result alive; while a tensor whose execution failed lives, torch_xla 2.9 fails every "
        "sync with 'Check failed: tensor_data' (natively too: "
        "fixtures/failed_execution_poisons_sync.py); on a TPU the int4 tests pass",
        link="docs/conformance.md#torch_xlas-tpu-gated-tests-issue-23",
    ),
}

#: Failures that are documented limits of emulation (docs/fidelity.md, "Cannot match"): the
#: emulation cannot do what the test asks, and says so; keyed and matched like KNOWN_BUGS.
EMULATION_LIMITS: dict[str, Explained] = {
    "dynamo/test_traceable_collectives.py": Explained(
        signature=r'assert met\.metric_data\("ExecuteTime"\)\[0\] == 1',
        reason="counts one XLA execution for a compiled graph with collectives in it; emulated "
        "collectives run on the host between XLA programs, so the graph runs in parts (2 "
        "executions at a world of 1, 1 natively)",
        link="docs/fidelity.md#cannot-match",
    ),
    "pjrt/test_runtime_tpu.py::TestExperimentalPjrtTpu::test_spawn_threads": Explained(
        signature=r"forked from process \d+ after its XLA runtime was already initialized",
        reason="forks a ProcessPoolExecutor child after the file's earlier tests launched on "
        "the emulated ranks, threads of the test process, so its XLA runtime had started and "
        "the child cannot compute (natively it would hang: fixtures/fork_after_runtime_start.py); "
        "on a TPU those launches ran in processes of their own. Alone it passes",
        link="docs/fidelity.md#cannot-match",
    ),
    "test_persistent_cache.py::PersistentCacheTest::test_persistent_cache_mp": Explained(
        signature=r"Computation cache has already been initialized",
        reason="calls xr.initialize_cache in two xmp.spawn launches; on a TPU each makes fresh "
        "processes, here the warm ranks share one process whose cache the first launch set up",
        link="docs/fidelity.md#cannot-match",
    ),
    "test_persistent_cache.py": Explained(
        signature=r"xr\.initialize_cache in process \d+, which was forked from process \d+ after "
        r"its XLA runtime was already initialized",
        reason="each test forks ProcessPoolExecutor children, which call xr.initialize_cache; "
        "after test_persistent_cache_mp launched on the emulated ranks, threads of the test "
        "process, its runtime had started, and a child forked from it cannot compute (on a TPU "
        "the test process never starts it). Run alone, the tests wait on the persistent cache, "
        "which the CPU client does not keep (a second process neither hits nor misses)",
        link="docs/fidelity.md#cannot-match",
    ),
}

#: Files or pytest ids whose ranks legitimately exchange nothing through collectives, with why.
#: One here must still launch ranks to pass.
NO_COLLECTIVES: dict[str, str] = {
    # The negative control of test_broadcast_master_param: the test checks, on the per-rank
    # results, that parameters differ when nothing synchronizes them.
    "pjrt/test_collective_ops_tpu.py::TestXMCollectiveOpsTpu::"
    "test_broadcast_master_param_unsynchronized_parameters": "a control: unsynchronized "
    "parameters must differ",
}

#: Output that proves a failure needs real TPU hardware, with the explanation shown: each is the
#: error of a TPU-only compiler or kernel path met on the CPU backend, not a mere mention.
NEEDS_TPU: tuple[tuple[re.Pattern[str], str], ...] = (
    (
        re.compile(r"Only interpret mode is supported on CPU backend"),
        "a Pallas kernel: JAX lowers Pallas to Mosaic for TPUs only (on CPU: 'Only interpret "
        "mode is supported on CPU backend')",
    ),
    (
        re.compile(r"No registered implementation for untyped custom call to tpu_custom_call"),
        "a Mosaic kernel in the graph (tpu_custom_call): only the TPU's XLA runs it",
    ),
    (
        re.compile(r"NotImplementedError: TPU version must be \d+ or higher"),
        "a Pallas kernel that asks JAX for the TPU generation: JAX's own devices are CPUs",
    ),
    (
        re.compile(r"backend does not support custom element sizes on non-sub-byte types"),
        "int4 weights in a packed (sub-byte) layout, which only the TPU's XLA compiles",
    ),
    (re.compile(r"libtpu", re.I), "needs libtpu, the TPU runtime library"),
)

#: torch_xla's messages for "this device is not the hardware I test; nothing checked". Exit 0
#: after one of these is a silent skip even if something else was checked. The primary evidence
#: is the run's count of launches and collectives; these catch partial skips.
HARDWARE_GATES = re.compile(
    r"is not a (?:TPU|supported) device|does not support replication|Only TPU supported"
)

#: Arguments for scripts that would otherwise need data sets or hours: the flags torch_xla's
#: docs use for these scripts (docs/source/learn/_pjrt.md, perf/ddp.md), one short epoch; the
#: ImageNet scripts also stop after 2 steps of 2 images where they honour --num_steps
#: (imagenet_fsdp does not, and its fake epoch is 75,000 steps: it times out on any CPU). The FSDP
#: checkpoint goes to the job's own working directory, not a shared /tmp path where another
#: run's shards would be found.
_SHORT = ("--fake_data", "--num_epochs", "1")
_SMALL_IMAGENET = (*_SHORT, "--batch_size", "2", "--test_set_batch_size", "2")
SCRIPT_ARGS: dict[str, tuple[str, ...]] = {
    "test_train_mp_mnist.py": _SHORT,
    "test_train_mp_mnist_amp.py": _SHORT,
    "test_train_mp_mnist_zero1.py": _SHORT,
    "test_train_mp_mnist_fsdp_with_ckpt.py": (*_SHORT, "--ckpt_prefix", "ckpt/final_ckpt"),
    "test_train_mp_imagenet.py": (*_SMALL_IMAGENET, "--num_steps", "2"),
    "test_train_mp_imagenet_amp.py": (*_SMALL_IMAGENET, "--num_steps", "2"),
    "test_train_mp_imagenet_fsdp.py": _SMALL_IMAGENET,
    # As torch_xla's CPU CI runs it (test/run_tests.sh): "CPU does not support optimization
    # barriers", so no gradient checkpointing runs. Its model size and steps take no flags.
    "spmd/test_train_spmd_linear_model.py": ("--skip-gradient-checkpointing",),
    # A benchmark whose default --kernel is not one of its kernels; the first of its usage
    # lines, the torch_xla path (a Pallas kernel on a TPU).
    "benchmarks/test_ragged_paged_attention_benchmark.py": (
        "--kernel",
        "ragged-paged-attention-with-torch-xla-dynamo",
    ),
}

#: Environment variables torch_xla's own runs set for a file (test/run_tests.sh and
#: test/tpu/run_tests.sh), set here too, natively and emulated.
FILE_ENV: dict[str, dict[str, str]] = {
    # Bounded dynamic shapes for nonzero / masked_select, test/tpu/run_tests.sh's value: without
    # them its compile-once test compiles once per input (it counts compiles).
    "ds/test_dynamic_shape_models.py": {"XLA_EXPERIMENTAL": "nonzero:masked_select:nms"},
}

#: `tpu` suite files whose tests torch_xla's TPU CI runs each in a process of its own
#: (test/tpu/run_tests.sh), with the tests in its order: they cannot share a process on a TPU.
ONE_PROCESS_PER_TEST: dict[str, tuple[str, ...]] = {
    # Each sets its own mat mul precision for one graph structure; a TPU's compilation cache
    # does not key on the precision, so in one process the first precision's executable runs
    # for the others (pytorch/xla#9129; docs/tpu-arithmetic.md).
    "test_mat_mul_precision.py": tuple(
        f"TestMatMulPrecision::{test}"
        for test in ("test_high", "test_default", "test_highest", "test_all")
    ),
}

#: `tpu` suite files that run as scripts although they have tests, with why: code they need runs
#: at import before the XLA runtime starts (xlasim's pytest plugin starts it before collection:
#: emulation fixes the device count first), or in their `__main__` block, which pytest skips.
SCRIPT_ONLY: dict[str, str] = {
    "pjrt/test_dynamic_plugin_tpu.py": "enables torch_xla's dynamic PJRT plugins at import "
    "(`plugins.use_dynamic_plugins()`: 'Can't enable dynamic plugins after XLA runtime is "
    "initialized')",
    "scan/test_scan_pallas.py": "turns SPMD on and sets the global mesh in its `__main__` block "
    "(test/tpu/run_tests.sh runs it as a script); under pytest its tests find no mesh "
    "('NoneType' object has no attribute 'get_op_sharding'), on a TPU too",
}
