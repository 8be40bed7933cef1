"""What the ``coplay play`` tests need to send Ctrl-C to a child process."""

from __future__ import annotations

import signal


def ctrl_c_as_at_a_terminal() -> None:
    """A person's shell delivers Ctrl-C; a test runner started in the background (a
    non-interactive shell's ``&``) ignores SIGINT, its children inherit that, and Python
    then installs no KeyboardInterrupt handler. Undo it in the child, as a terminal would."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
