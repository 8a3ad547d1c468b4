"""pip, imported once and run in a forked child per request: what tests/pipindex.py starts, so that
the fixes' pip lines cost a fork each instead of an interpreter and pip's imports.

    python -S tests/pipserver.py PIP_HOME     # PIP_HOME holds the pip package (a link to it)

Reads one JSON request a line on stdin, ``{"env": VENV, "site": SITE_PACKAGES, "argv": [...],
"log": FILE}``, runs ``pip argv`` in a child whose ``sys.prefix`` is VENV and whose ``sys.path`` is
pip and SITE_PACKAGES before the standard library (what pip sees installed is that folder, as when
VENV's python runs it), pip's output in FILE, and answers ``{"rc": N}``.  Standard library and pip only.
"""

import json
import os
import sys


def main() -> None:
    pip_home = sys.argv[1]
    sys.path.insert(0, pip_home)
    from pip._internal.cli.main import main as pip_main
    from pip._internal.commands import create_command

    for name in ("install", "uninstall"):
        create_command(name)
    for module in ("pip._internal.resolution.resolvelib.resolver", "pip._internal.index.package_finder",
                   "pip._internal.index.collector", "pip._internal.operations.prepare",
                   "pip._internal.models.installation_report", "pip._internal.network.session"):
        try:
            __import__(module)     # imported by the first request otherwise, in every child
        except ImportError:
            pass
    base = [p for p in sys.path if p != pip_home]
    for line in sys.stdin:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            fd = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(fd, 1)
            os.dup2(fd, 2)
            sys.prefix = sys.exec_prefix = request["env"]
            sys.path[:] = [pip_home, request["site"], *base]
            try:
                code = pip_main(request["argv"])
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else 1
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code or 0)
        _, status = os.waitpid(pid, 0)
        print(json.dumps({"rc": os.waitstatus_to_exitcode(status)}), flush=True)


if __name__ == "__main__":
    main()
