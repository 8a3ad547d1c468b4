"""The exit codes of every command and what each means (docs/cli.md, the man page's EXIT STATUS).

A module of its own, importing nothing, so that the entry point knows them before it
imports the rest of debtorch (debtorch/cli/__init__.py).
"""

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_OUTPUT = 74        # EX_IOERR (sysexits.h): standard output closed or full
EXIT_HANGUP = 129       # 128 + SIGHUP
EXIT_INTERRUPTED = 130  # 128 + SIGINT
EXIT_QUIT = 131         # 128 + SIGQUIT
EXIT_PIPE = 141         # 128 + SIGPIPE: what `cat` and `grep` give when the reader goes away
EXIT_TERMINATED = 143   # 128 + SIGTERM

# The same for every command: docs/cli.md and the man page's EXIT STATUS list these.
EXIT_CODES = (
    (EXIT_OK, "fine"),
    (EXIT_FAILED, "findings at or above --fail-on, or a run that failed"),
    (EXIT_USAGE, "bad usage or unreadable input"),
    (EXIT_OUTPUT, "standard output could not be written (closed, or the disk is full)"),
    (EXIT_HANGUP, "hung up (SIGHUP: the terminal or the SSH session closed)"),
    (EXIT_INTERRUPTED, "interrupted (Ctrl-C)"),
    (EXIT_QUIT, "quit (SIGQUIT)"),
    (EXIT_PIPE, "the reader of standard output went away (a broken pipe, as with | head); nothing said"),
    (EXIT_TERMINATED, "terminated (SIGTERM)"),
)
