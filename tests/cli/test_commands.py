"""The command table the CLI loads commands from on demand matches the commands its modules define."""

from __future__ import annotations

import importlib
import json
import pkgutil
import subprocess
import sys

import tracekit.cli
from tests.conftest import REPO
from tracekit.cli.app import COMMAND_MODULES, main


def test_every_command_is_found_in_the_module_that_defines_it():
    for info in pkgutil.iter_modules(tracekit.cli.__path__):
        if info.name != "__main__":  # running it is `python -m tracekit.cli`
            importlib.import_module(f"tracekit.cli.{info.name}")
    assert set(main.commands) == set(COMMAND_MODULES)
    for name, command in main.commands.items():
        callback = command.callback or next(iter(command.commands.values())).callback
        assert callback.__module__ == f"tracekit.cli.{COMMAND_MODULES[name]}", name


def test_a_report_does_not_import_the_other_commands():
    """`tracekit report` imports its own command module only (the point of loading commands on demand)."""
    code = ("import json, sys; from tracekit.cli import main\n"
            "try:\n    main(['report', '--help'])\nexcept SystemExit:\n    pass\n"
            "print(json.dumps(sorted(m for m in sys.modules\n"
            "                        if m.startswith(('tracekit.cli.', 'tracekit.diff', 'tracekit.replay')))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True).stdout
    loaded = json.loads(out.strip().splitlines()[-1])
    assert "tracekit.cli.traces" in loaded
    assert not {"tracekit.cli.compare", "tracekit.cli.replay", "tracekit.cli.export", "tracekit.replay"} & set(loaded)


def test_python_dash_m_tracekit_is_the_command(tmp_path):
    """`python -m tracekit` runs the CLI as the installed `tracekit` script does: its version, and a user error's one
    line and exit code 2."""
    ran = subprocess.run([sys.executable, "-m", "tracekit", "--version"], capture_output=True, text=True, cwd=REPO,
                         check=False)
    assert ran.returncode == 0 and ran.stdout.split()[-1] == tracekit.__version__, ran.stderr
    missing = subprocess.run([sys.executable, "-m", "tracekit", "report", str(tmp_path / "absent.json"), "-o",
                              str(tmp_path / "out")], capture_output=True, text=True, cwd=REPO, check=False)
    assert missing.returncode == 2 and "Traceback" not in missing.stderr
    assert "absent.json" in missing.stderr and len(missing.stderr.strip().splitlines()) == 1
