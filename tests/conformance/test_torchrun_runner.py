"""The conformance runner launches a file written for torchrun the way upstream runs it: with
`xlasim run --torchrun`, recognised by its own signature (a call to
`dist.is_torchelastic_launched()`), never as a plain script or under pytest, where it would
only print "Test must be launched with torchrun!"."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from xlasim.conformance.discovery import SCRIPT, TORCHRUN, discover, modes
from xlasim.runners.rows import PASSED

#: In the style of torch_xla's pjrt/test_torchrun.py: an absltest file that refuses to run
#: outside torchrun; each test joins the `xla` group in setUp and leaves it in tearDown.
TORCHRUN_STYLE = textwrap.dedent(
    """
    import sys
    from absl.testing import absltest
    import torch
    import torch.distributed as dist
    import torch_xla
    import torch_xla.distributed.xla_backend
    import torch_xla.utils.utils as xu


    class TestTorchrunStyle(absltest.TestCase):

      def setUp(self):
        dist.init_process_group('xla', init_method='xla://')

      def tearDown(self):
        dist.destroy_process_group()

      def test_all_reduce(self):
        n = xu.getenv_as('WORLD_SIZE', int)
        value = torch.tensor([dist.get_rank() + 1.0], device='xla')
        dist.all_reduce(value)
        torch_xla.sync()
        self.assertEqual(value.cpu().item(), n * (n + 1) / 2)

      def test_all_gather(self):
        n = xu.getenv_as('WORLD_SIZE', int)
        rank = torch.tensor([float(dist.get_rank())], device='xla')
        output = [rank.clone() for _ in range(n)]
        dist.all_gather(output, rank)
        torch_xla.sync()
        self.assertEqual(torch.concat(output).cpu().tolist(), list(range(n)))


    if __name__ == '__main__':
      if not dist.is_torchelastic_launched():
        print('Test must be launched with torchrun!', file=sys.stderr)
        sys.exit(1)
      absltest.main()
    """
)


def test_a_file_that_asks_for_torchrun_runs_only_under_it() -> None:
    assert modes(TORCHRUN_STYLE) == [TORCHRUN]
    # Mentioning torchrun is not asking for it (test_train_mp_imagenet.py's comment).
    assert modes(
        "# if running with torchrun, nprocs is omitted\nif __name__ == '__main__':\n  pass\n"
    ) == [SCRIPT]


def test_the_runner_passes_a_torchrun_file_with_its_counts(tmp_path: Path) -> None:
    root = tmp_path / "test"
    (root / "pjrt").mkdir(parents=True)
    (root / "pjrt" / "test_torchrun.py").write_text(TORCHRUN_STYLE)
    assert [(job.rel, job.mode) for job in discover(root, "mp")] == [
        ("pjrt/test_torchrun.py", TORCHRUN)
    ]
    rows_file = tmp_path / "rows.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("XLASIM_", "PYTEST_"))}
    runner = [sys.executable, "-m", "xlasim", "conformance", str(root), "--devices", "2"]
    done = subprocess.run(
        [*runner, "--timeout", "300", "--json", str(rows_file)],
        capture_output=True,
        text=True,
        env=env,
        timeout=400,
    )
    rows = json.loads(rows_file.read_text())
    assert [(row["id"], row["mode"], row["result"]) for row in rows] == [
        ("pjrt/test_torchrun.py", TORCHRUN, PASSED)
    ], done.stderr[-3000:]
    assert rows[0]["reason"].endswith("ran 2 tests: OK"), rows[0]
    assert "1 launch" in rows[0]["reason"] and "all_gather" in rows[0]["reason"]
    assert done.returncode == 0
