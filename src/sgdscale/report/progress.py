"""Progress for work that may take a while: nothing for the first 2 s, then a transient bar on stderr.

A prediction of a few milliseconds stays silent; anything longer than `DELAY_S` shows what it is
doing, how far it got and for how long, even inside one long job (a timer starts the bar; rich
refreshes it from its own thread, so a 16 s simulation of one worker count still shows it).
"""

from __future__ import annotations

import threading

DELAY_S = 2.0


class DelayedProgress:
    """Context manager yielding `report(done, total, label)` (the `sgdscale.predict.Progress`
    callback); the bar appears once the work has run `delay_s` and only on a terminal, unless a
    console with `force_terminal` is given."""

    def __init__(self, console, what: str = "predicting", delay_s: float = DELAY_S) -> None:
        self.console, self.what, self.delay_s = console, what, delay_s
        self.state = (0, 1, "starting")
        self.bar = None
        self.task = None
        self.lock = threading.Lock()
        self.timer: threading.Timer | None = None
        self.closed = False

    def __enter__(self):
        if self.console.is_terminal:
            self.timer = threading.Timer(self.delay_s, self._show)
            self.timer.daemon = True
            self.timer.start()
        return self.report

    def _show(self) -> None:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

        with self.lock:
            if self.closed:
                return
            self.bar = Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                TimeElapsedColumn(), console=self.console, transient=True)
            self.bar.start()
            done, total, label = self.state
            self.task = self.bar.add_task(f"{self.what}: {label}", total=total, completed=done)

    def report(self, done: int, total: int, label: str) -> None:
        with self.lock:
            self.state = (done, total, label)
            if self.bar is not None:
                self.bar.update(self.task, completed=done, total=total, description=f"{self.what}: {label}")

    def __exit__(self, *exc) -> None:
        with self.lock:
            self.closed = True
            if self.timer is not None:
                self.timer.cancel()
            if self.bar is not None:
                self.bar.stop()

    @property
    def shown(self) -> bool:
        """Whether the bar appeared (the work outlasted the delay on a terminal)."""
        return self.bar is not None
