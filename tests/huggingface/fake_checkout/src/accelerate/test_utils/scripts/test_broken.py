"""An accelerate-style test script with a failure no finding explains."""

from accelerate import Accelerator
from accelerate.utils import DistributedType


def main():
    if Accelerator().distributed_type == DistributedType.XLA:
        raise ValueError("a new failure")


if __name__ == "__main__":
    main()
