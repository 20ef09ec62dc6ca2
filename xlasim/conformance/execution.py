"""How one torch_xla test file runs: its command line and environment, emulated or natively.

The bounded subprocess, the files it leaves and its outcome are the runners' kit's
(`xlasim.runners.execution`); what is torch_xla's here is how its CI runs a file: as a script
(`python3 test/FILE.py`, under `xlasim run`), under torchrun, or under pytest with the
checkout's `test/` and `examples/` on the path, and natively on one CPU device as the baseline
of the `tpu` suite.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from ..runners.execution import (
    Outcome,
    RunFiles,
    Slice,
    child_environment,
    run_recorded,
)
from ..runners.probe_names import PROGRESS_ENV, probed_pytest_options
from .discovery import PYTEST, TORCHRUN, TorchXlaJob
from .expectations import FILE_ENV


def execute(
    job: TorchXlaJob, slice: Slice, timeout: float, workdir: Path, *, native: bool = False
) -> Outcome:
    """Run `job` on the emulated `slice` with `workdir` as its working directory (where
    anything the test writes to its current directory lands, with its output and reports);
    `native`: instead without xlasim, on one CPU device, as torch_xla's CPU CI runs it (the
    baseline a `tpu` suite row is compared with).

    Args:
        job: the file (or test) to run, and in which mode.
        slice: the emulated slice; unused when `native`.
        timeout: seconds before the run's process group is killed.
        workdir: the run's working directory, made if missing; an earlier run's reports in it
            are removed first.
        native: run without xlasim on one CPU device instead of on the emulated slice.
    """
    files = RunFiles.of(workdir).fresh()
    return run_recorded(
        native_command(job, files.junit) if native else command(job, slice, files.junit),
        env=environment(job, timeout, files.report, files.progress, native=native),
        files=files,
        timeout=timeout,
    )


def command(job: TorchXlaJob, slice: Slice, junit: Path) -> list[str]:
    """`job` on the emulated `slice`: under pytest with xlasim's plugin, else `xlasim run`.

    Args:
        job: the file (or test) to run, and in which mode (pytest, script or torchrun).
        slice: the emulated slice, as the plugin's or `xlasim run`'s options.
        junit: the junit file pytest writes (unused for a script).
    """
    if job.mode == PYTEST:
        return [
            sys.executable,
            "-m",
            "pytest",
            *slice.pytest_options(),
            job.target,
            f"--rootdir={job.root}",
            # Prepend, pytest's default: test/ is a package, so the checkout's root goes on
            # sys.path and a test module is `test.pjrt.test_x`, a name worker processes can
            # import to unpickle launched functions (importlib mode makes up names they
            # cannot). The checkout's torch_xla/ source folder does not shadow the installed
            # one: xlasim's plugin imports torch_xla before collection.
            "--import-mode=prepend",
            *probed_pytest_options(junit, job.deselect),
        ]
    return [
        sys.executable,
        "-m",
        "xlasim",
        "run",
        *slice.run_options(),
        *(["--torchrun"] if job.mode == TORCHRUN else []),
        str(job.path),
        *job.args,
    ]


def native_command(job: TorchXlaJob, junit: Path) -> list[str]:
    """`job` without xlasim: the file as a script, or under pytest without xlasim's plugin.

    Args:
        job: the file (or test) to run, and in which mode (pytest, else as a script).
        junit: the junit file pytest writes (unused for a script).
    """
    if job.mode != PYTEST:
        return [sys.executable, str(job.path), *job.args]
    return [
        sys.executable,
        "-m",
        "pytest",
        "-p",
        "no:xlasim",
        # Imported before collection, as xlasim's plugin imports it: prepend mode puts the
        # checkout's root on sys.path, and its torch_xla/ source folder would shadow the
        # installed package.
        "-p",
        "torch_xla",
        job.target,
        f"--rootdir={job.root}",
        "--import-mode=prepend",
        *probed_pytest_options(junit, job.deselect),
    ]


def environment(
    job: TorchXlaJob, timeout: float, report: Path, progress: Path, *, native: bool = False
) -> dict[str, str]:
    """The environment a torch_xla test file runs in, as its CI's run_tests.sh gives it: the
    file's own variables, torch's device-type tests pointed at XLA, and under pytest the
    paths a script would have found its helpers on.

    Args:
        job: the file (or test) to run, and in which mode.
        timeout: the run's seconds, which bound a collective's wait (`child_environment`).
        report: where `xlasim run` writes its run report (a script's launches and collectives).
        progress: where the probe plugin writes the ids of the tests that started (pytest).
        native: one CPU device without xlasim (`PJRT_DEVICE=CPU`) instead of the emulated
            slice.
    """
    env = child_environment(timeout)
    env.update(FILE_ENV.get(job.rel, {}))
    devices = job.root / "pytorch_test_base.py"
    if devices.is_file():  # test/run_tests.sh exports it for every file
        env["TORCH_TEST_DEVICES"] = str(devices)  # torch's device-type tests get an XLA variant
    if native:
        env["PJRT_DEVICE"] = "CPU"  # and no CPU_NUM_DEVICES: one device
    if job.mode == PYTEST:
        # Run as scripts, torch_xla's tests find their helpers (args_parse, distributed_util)
        # through sys.argv[0]; under pytest that is pytest's path, so put test/ on the path.
        # The file's own folder too, as for a script: test/spmd's files import their siblings.
        # And the checkout's examples/, which files find the same way (test_assume_pure.py,
        # dynamo/test_dynamo_dynamic_shape.py: `decoder_only_model`).
        examples = job.root.parent / "examples"
        paths = [str(job.root), str(job.path.parent), str(examples), env.get("PYTHONPATH")]
        env["PYTHONPATH"] = os.pathsep.join(filter(None, paths))
        env[PROGRESS_ENV] = str(progress)
    else:
        env["XLASIM_RUN_REPORT"] = str(report)
    return env
