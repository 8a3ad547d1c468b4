"""What the command-line tests share."""

from typer.testing import CliRunner


def cli_runner() -> CliRunner:
    """A runner that keeps stderr apart from stdout, on click 8.1 (Debian 12) and 8.2+."""
    try:
        return CliRunner(mix_stderr=False)  # click < 8.2 (Debian 12's 8.1.3)
    except TypeError:
        return CliRunner()  # click >= 8.2 always separates stderr
