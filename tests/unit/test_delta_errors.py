"""How the Delta output classifies delta-rs errors: a full disk is retryable whichever way
delta-rs raises it (an OSError without errno, or a DeltaError, the OS code in the text)."""

from __future__ import annotations

import errno

import pytest
from deltalake.exceptions import CommitFailedError, DeltaError, SchemaMismatchError

from dblog.errors import RetryableOutputError
from dblog.outputs.delta import classify, os_error_code

RUST_FULL = ("Generic LocalFileSystem error\n ↳ Unable to copy data to file\n"
             "  ↳ No space left on device (os error 28)")


@pytest.mark.parametrize("exc", [OSError(RUST_FULL), DeltaError(RUST_FULL),
                                 OSError(errno.ENOSPC, "No space left on device"),
                                 OSError("quota exceeded (os error 122)")])
def test_a_full_disk_is_retryable_and_says_so(exc: Exception) -> None:
    error = classify(exc, "flushing delta:/x")
    assert error.retryable and isinstance(error, RetryableOutputError)
    assert "the disk under the Delta table is full" in error.message


@pytest.mark.parametrize("exc", [SchemaMismatchError("field v: int64 vs string"),
                                 DeltaError("protocol version 3 not supported"),
                                 OSError("permission denied (os error 13)"),
                                 ValueError("No space left (os error 28)")])
def test_other_errors_are_fatal(exc: Exception) -> None:
    assert not classify(exc, "flushing delta:/x").retryable


def test_a_lost_commit_race_and_an_io_error_are_retryable() -> None:
    assert classify(CommitFailedError("version 7 exists"), "x").retryable
    assert classify(OSError("Input/output error (os error 5)"), "x").retryable
    assert os_error_code(OSError(errno.EIO, "x")) == errno.EIO
