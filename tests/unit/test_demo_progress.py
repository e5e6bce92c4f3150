"""The demo's and the chaos run's progress line: redrawn in place on a terminal, plain lines
now and then in a log file or a CI log (demo.progress)."""

from __future__ import annotations

import io

from tools.demo.progress import ProgressLine


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_in_a_log_each_line_is_whole_and_updates_are_spaced_out() -> None:
    log, clock = io.StringIO(), Clock()
    line = ProgressLine(log, log_interval=5.0, clock=clock)
    for second in range(12):
        clock.now = float(second)
        line.show(f"{second * 10}/200 finished")
    line.end()

    assert "\r" not in log.getvalue()
    # The first state, one every five seconds, and the last state at the end.
    assert log.getvalue().splitlines() == [
        "0/200 finished",
        "50/200 finished",
        "100/200 finished",
        "110/200 finished",
    ]


def test_in_a_log_an_unchanged_state_is_not_written_again() -> None:
    log, clock = io.StringIO(), Clock()
    line = ProgressLine(log, log_interval=5.0, clock=clock)
    for second in range(0, 30, 5):
        clock.now = float(second)
        line.show("200/200 finished")
    line.end()

    assert log.getvalue() == "200/200 finished\n"


def test_on_a_terminal_the_line_is_redrawn_in_place() -> None:
    terminal = Terminal()
    line = ProgressLine(terminal)
    line.show("10/200 finished  received 30")
    line.show("20/200 finished")
    line.note("host at 3.0 s, restarted at 3.5 s")
    line.show("30/200 finished")
    line.end()

    assert terminal.getvalue() == (
        "\r10/200 finished  received 30"
        # Padded over what the longer text left.
        "\r20/200 finished             "
        "\nhost at 3.0 s, restarted at 3.5 s\n"
        "\r30/200 finished"
        "\n"
    )


def test_a_run_without_progress_writes_nothing() -> None:
    for stream in (io.StringIO(), Terminal()):
        ProgressLine(stream).end()
        assert stream.getvalue() == ""
        off = ProgressLine(stream, enabled=False)
        off.show("1/2 finished")
        off.note("host at 1.0 s, restarted at 1.5 s")
        off.end()
        assert stream.getvalue() == ""
