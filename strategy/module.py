"""What the Trainer trains: a module that knows its loss and its optimizer."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn


class TrainingModule(nn.Module):
    """An `nn.Module` with the three hooks the Trainer calls.

    `configure_optimizers` is called on each rank after the module has moved to the device, so
    the optimizer holds the device parameters.
    """

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        """The loss of one batch (on the device)."""
        raise NotImplementedError(f"{type(self).__name__} must define training_step")

    def validation_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        """The validation loss of one batch; by default the training loss."""
        return self.training_step(batch, batch_idx)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        """The optimizer over `self.parameters()`."""
        raise NotImplementedError(f"{type(self).__name__} must define configure_optimizers")
