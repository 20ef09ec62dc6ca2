"""What a TPU computes that the XLA CPU device does not on its own: `arithmetic` (the MXU's
matmul and convolution precision), `memory` (each device's HBM: its live bytes, the refusal
past it)."""
