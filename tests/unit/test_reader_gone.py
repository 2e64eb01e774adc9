"""Standard output whose reader has gone (fedsheaf.util.reader_gone), on real descriptors: a
broken pipe is survived, an I/O error (a terminal or launcher gone) ends the run with words
that say so."""

from __future__ import annotations

import os

import pytest

from fedsheaf.util.reader_gone import OutputGone, ReaderGoneGuard


def test_a_hung_up_terminal_is_an_error_that_names_the_launcher_not_the_disk():
    leader, follower = os.openpty()
    stream = open(follower, "w", buffering=1, encoding="utf-8")  # line buffered, as a tty
    guard = ReaderGoneGuard(stream)
    try:
        guard.write("epoch 1\n")  # the terminal is there: written
        os.close(leader)  # it hangs up (mpiexec killed): writes fail with EIO
        with pytest.raises(OutputGone, match="the launcher that relays it"):
            guard.write("epoch 2\n")
            guard.flush()
        assert not guard.reader_gone
    finally:
        try:
            stream.close()
        except OSError:
            pass


def test_a_broken_pipe_is_survived_and_said_once(capfd):
    read_end, write_end = os.pipe()
    stream = open(write_end, "w", buffering=1, encoding="utf-8")
    guard = ReaderGoneGuard(stream)
    os.close(read_end)  # `| head` has read enough
    guard.write("epoch 1\n")
    guard.write("epoch 2\n")
    guard.flush()
    assert guard.reader_gone
    assert capfd.readouterr().err.count("standard output's reader has gone") == 1
