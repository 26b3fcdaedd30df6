import subprocess
import sys

from insitu.cli import info, main


def test_info_reports_the_cpu_stack(capsys):
    d = info()
    assert d["numpy"] != "" and not d["numpy"].startswith("not available")
    assert d["mpi"].startswith(("MPICH", "Open MPI"))
    assert d["mpi cuda-aware"] in ("True", "False")
    assert main(["info"]) == 0
    assert "mpi4py" in capsys.readouterr().out


def test_unknown_command_is_refused():
    p = subprocess.run([sys.executable, "-m", "insitu.cli", "frobnicate"], capture_output=True, text=True)
    assert p.returncode == 2 and "invalid choice: 'frobnicate'" in p.stderr
