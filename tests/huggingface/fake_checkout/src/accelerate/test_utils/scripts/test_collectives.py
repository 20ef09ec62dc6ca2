"""An accelerate-style test script that passes on the emulated slice: launched by
`accelerate launch --tpu`, every rank gathers its index."""

import torch
from accelerate import Accelerator
from accelerate.utils import DistributedType


def main():
    accelerator = Accelerator()
    assert accelerator.distributed_type == DistributedType.XLA
    mine = torch.tensor([accelerator.process_index], device=accelerator.device)
    gathered = accelerator.gather(mine).cpu().tolist()
    assert gathered == list(range(accelerator.num_processes)), gathered


if __name__ == "__main__":
    main()
