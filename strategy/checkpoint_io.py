"""Reading and writing checkpoint files: atomic writes, and errors that say what is wrong with a file.

This is the single-process half. Which rank touches the file, and how the others learn the
outcome, is the strategy's job (`XLAStrategy.save_checkpoint` / `load_checkpoint`).
"""

from __future__ import annotations

import io
import os
import pickle
import zipfile
from pathlib import Path
from typing import Any

from . import serialization


class CheckpointError(RuntimeError):
    """A checkpoint could not be written, read or removed."""


class CheckpointNotFoundError(CheckpointError, FileNotFoundError):
    """The checkpoint file does not exist."""


class CheckpointCorruptError(CheckpointError):
    """The file exists but is not a complete, readable checkpoint."""


class XLACheckpointIO:
    """Checkpoint files written with `torch.save` (XLA tensors as host tensors), read onto the CPU."""

    def save_checkpoint(
        self, checkpoint: dict[str, Any], path: str | os.PathLike, storage_options: Any = None
    ) -> None:
        """Write `checkpoint` to `path` atomically (a temporary file renamed into place)."""
        check_storage_options(storage_options)
        if not isinstance(checkpoint, dict):
            raise TypeError(
                f"a checkpoint is a dict of state, got {type(checkpoint).__name__} for {path}"
            )
        serialization.save_atomic(checkpoint, path)

    def read_bytes(self, path: str | os.PathLike) -> bytes:
        """The raw file, or `CheckpointNotFoundError`."""
        try:
            return Path(path).read_bytes()
        except FileNotFoundError:
            raise CheckpointNotFoundError(f"checkpoint not found: {path}") from None
        except IsADirectoryError:
            raise CheckpointNotFoundError(
                f"checkpoint path is a directory, not a file: {path}"
            ) from None

    def load_bytes(self, data: bytes, path: str | os.PathLike, weights_only: bool = True) -> Any:
        """Deserialize a checkpoint read from `path`, tensors on the CPU; clear errors if it is
        truncated, corrupt, or holds objects that `weights_only` loading refuses."""
        _check_archive(data, path)
        try:
            return serialization.load_bytes(data, weights_only=weights_only)
        except pickle.UnpicklingError as error:
            if weights_only and "Weights only load failed" in str(error):
                raise CheckpointError(
                    f"checkpoint {path} holds objects that weights_only loading refuses (such as "
                    "modules or custom classes); if you trust the file, load it with "
                    f"weights_only=False. torch said: {str(error).splitlines()[0]}"
                ) from error
            raise CheckpointCorruptError(
                f"checkpoint {path} is corrupt: {type(error).__name__}: {error}"
            ) from error
        except Exception as error:
            raise CheckpointCorruptError(
                f"checkpoint {path} is corrupt: {type(error).__name__}: {error}"
            ) from error

    def load_checkpoint(self, path: str | os.PathLike, weights_only: bool = True) -> Any:
        """Read and deserialize `path` onto the CPU."""
        return self.load_bytes(self.read_bytes(path), path, weights_only)

    def remove_checkpoint(self, path: str | os.PathLike) -> None:
        """Delete `path` if it exists."""
        Path(path).unlink(missing_ok=True)


def _check_archive(data: bytes, path: str | os.PathLike) -> None:
    """A torch.save file is a zip archive: check that it is complete and that every member
    matches its CRC (torch.load itself would load flipped payload bytes silently)."""
    if not zipfile.is_zipfile(io.BytesIO(data)):
        raise CheckpointCorruptError(
            f"checkpoint {path} is truncated or corrupt: its {len(data)} bytes are not a "
            "complete torch.save archive (was the writer killed, or the file copied partly?)"
        )
    try:
        damaged = zipfile.ZipFile(io.BytesIO(data)).testzip()
    except Exception as error:
        raise CheckpointCorruptError(
            f"checkpoint {path} is corrupt: {type(error).__name__}: {error}"
        ) from error
    if damaged is not None:
        raise CheckpointCorruptError(
            f"checkpoint {path} is corrupt: archive member {damaged!r} fails its CRC check"
        )


def check_storage_options(storage_options: Any) -> None:
    """XLACheckpointIO writes local files and takes no storage options: say so instead of
    ignoring them."""
    if storage_options is not None:
        raise TypeError(
            f"storage_options={storage_options!r} is not supported: XLACheckpointIO writes a local "
            "file with torch.save and has no options. Pass storage_options=None, or give the "
            "strategy a checkpoint_io of your own that understands them."
        )
