"""Running one Hugging Face job in its own bounded subprocess on the emulated slice.

Scripts run under `xlasim run` with the launcher their TPU CI uses (`accelerate launch --tpu`,
or transformers' `xla_spawn.py`), so their `xmp.spawn` lands on the emulated cores; pytest jobs
run under `pytest --xla-devices=N` with the probe that counts each test's launches. Nothing may
download: the hub and datasets are switched offline, so a job that needs a model or a data set
fails saying so (and is classified "needs hub"). The working directory is the run's own log
directory: what a script writes next to itself (`./examples`) stays out of the checkout.
"""

from __future__ import annotations

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
from .discovery import ACCELERATE_LAUNCH, PYTEST, TRANSFORMERS_XLA_SPAWN, HuggingFaceJob

#: Hugging Face's switches that keep every download from happening (huggingface_hub, datasets,
#: transformers), set in every run.
OFFLINE = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


def execute(job: HuggingFaceJob, slice: Slice, timeout: float, workdir: Path) -> Outcome:
    """Run `job` on `slice`, bounded by `timeout` seconds; its output, junit file and run
    report go to `workdir`, which is also its working directory.

    Args:
        job: a script and its launcher, or a file's TPU-gated pytest tests.
        slice: the emulated slice.
        timeout: seconds before the run's process group is killed.
        workdir: where its files go and where it runs, made if missing; an earlier run's
            reports in it are removed first.
    """
    files = RunFiles.of(workdir).fresh()
    return run_recorded(
        command(job, slice, files.junit),
        env=environment(timeout, files.report, files.progress),
        files=files,
        timeout=timeout,
    )


def command(job: HuggingFaceJob, slice: Slice, junit: Path) -> list[str]:
    """The command line of `job`: pytest with xlasim's plugin and the probe, or `xlasim run`
    around the launcher its TPU CI uses (`accelerate launch --tpu`, `xla_spawn.py`).

    Args:
        job: what to run, and its mode (pytest, or the launcher of a script).
        slice: the emulated slice; its core count is also the launcher's process count.
        junit: the junit file pytest writes (unused for a script).
    """
    if job.mode == PYTEST:
        return [
            sys.executable,
            "-m",
            "pytest",
            *slice.pytest_options(),
            str(job.root / job.target),
            # By name, not node id: xlasim's plugin runs a file that calls xr.use_spmd() (as
            # accelerate's tests/test_utils.py does) in a child session, and its tests cannot be
            # selected by `file::Class::test` there.
            "-k",
            " or ".join(test.rsplit("::", 1)[-1] for test in job.tests),
            f"--rootdir={job.root}",
            *probed_pytest_options(junit, ()),
        ]
    run = [sys.executable, "-m", "xlasim", "run", *slice.run_options()]
    script = str(job.root / job.target)
    if job.mode == ACCELERATE_LAUNCH:
        launch = ["-m", "accelerate.commands.launch", "--tpu"]
        # accelerate's TPU launcher calls the script's main() on every rank (without a config
        # file `--main_training_function` defaults to None and the launch fails: a TypeError).
        options = [f"--num_processes={slice.devices}", "--main_training_function=main"]
        return [*run, *launch, *options, script]
    return [*run, str(job.root / TRANSFORMERS_XLA_SPAWN), f"--num_cores={slice.devices}", script]


def environment(timeout: float, report: Path, progress: Path) -> dict[str, str]:
    """The environment of every Hugging Face job: the hub and datasets offline (nothing may
    download), and where each kind of job reports what it did.

    Args:
        timeout: the run's seconds, which bound a collective's wait (`child_environment`).
        report: where `xlasim run` writes its run report (a script's launches and collectives).
        progress: where the probe plugin writes the ids of the tests that started (pytest).
    """
    env = child_environment(timeout)
    env.update(OFFLINE)
    env["XLASIM_RUN_REPORT"] = str(report)
    env[PROGRESS_ENV] = str(progress)
    return env
