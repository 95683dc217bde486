"""The Spark driver's class-data archive (Java AppCDS): Spark's classes mapped at start instead of loaded one by one.

A query's start loads and verifies some ten thousand classes out of pyspark's jars, one ``JarFile`` lookup at a
time (JFR: most of the driver JVM's CPU in a query's first batch). A dynamic archive written by one run of the
packaged sample (``class-archive``; the image writes one at build, ``deploy/Dockerfile``) holds them parsed and
verified: with it, ``bench stream``'s first batch took 2.1 s instead of 2.6 s and the driver JVM 0.3 CPU-s per 1M
events less. A JVM maps an archive only for the Java build and class path that wrote it; any other is ignored
without a word (``-Xlog:cds=off``), so an archive never stops a start.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path

from connector.errors import ConnectorError

log = logging.getLogger(__name__)

#: The JVM explains on stdout why it does not map an archive: that is not the service's log.
_QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"
_ARCHIVE_FLAG = re.compile(r"-XX:(SharedArchiveFile|ArchiveClassesAtExit)=\S+")
_WRITE_TIMEOUT_S = 600
#: A checkout's archives (the test suite's and the benchmarks'), beside its other caches (``.cache/jars``).
REPO_ARCHIVES = Path(__file__).resolve().parents[2] / ".cache" / "spark-cds"


class ClassArchiveError(ConnectorError):
    """The class-data archive could not be written."""


def archive_java_options(archive: str | None) -> str:
    """The driver JVM's options that map ``archive`` (empty when none is set or the file is missing)."""
    if not archive:
        return ""
    if not Path(archive).is_file():
        log.warning("spark.class_archive %s does not exist: the driver starts without it", archive)
        return ""
    return f"-XX:SharedArchiveFile={archive} {_QUIET}"


def archive_for_this_java(folder: Path = REPO_ARCHIVES) -> Path:
    """The archive's file in ``folder`` for this pyspark and this Java binary: only those two can map it."""
    import pyspark

    java = os.path.realpath(shutil.which("java") or "java")
    key = hashlib.sha256(f"{pyspark.__version__} {java} {sys.executable}".encode()).hexdigest()[:12]
    return folder / f"spark-{pyspark.__version__}-{key}.jsa"


def write_class_archive(archive: Path, environ: Mapping[str, str] | None = None) -> None:
    """Write ``archive`` from one ``run`` of the packaged sample (the embedded default: no Kafka, a local folder).

    The JVM writes the classes it loaded when it exits (``-XX:ArchiveClassesAtExit``); the file appears under its
    name only once complete. ``environ``: the run's environment (default: this process's).

    Raises:
        ClassArchiveError: the run failed or wrote no archive (its output's end is in the message).
    """
    archive.parent.mkdir(parents=True, exist_ok=True)
    partial = archive.with_name(archive.name + ".partial")
    partial.unlink(missing_ok=True)
    env = sample_run_environment(os.environ if environ is None else environ, partial)
    with tempfile.TemporaryDirectory(prefix="class-archive-") as scratch:
        command = [sys.executable, "-m", "connector", "run", "--trigger", "available-now", "--metrics-port", "0",
                   "--landing-zone", f"{scratch}/lz", "--checkpoint", f"{scratch}/cp"]  # fmt: skip
        try:
            done = subprocess.run(  # noqa: S603 - this interpreter, fixed arguments
                command, env=env, capture_output=True, text=True, timeout=_WRITE_TIMEOUT_S, check=False
            )
        except subprocess.TimeoutExpired as exc:
            msg = f"writing the class archive {archive}: the sample run took over {_WRITE_TIMEOUT_S} s"
            raise ClassArchiveError(msg) from exc
    if done.returncode != 0 or not partial.is_file():
        partial.unlink(missing_ok=True)
        tail = (done.stderr or done.stdout)[-2000:]
        msg = f"writing the class archive {archive}: the sample run exited {done.returncode}:\n{tail}"
        raise ClassArchiveError(msg)
    partial.replace(archive)


def sample_run_environment(environ: Mapping[str, str], partial: Path) -> dict[str, str]:
    """The sample run's environment: ``environ`` without the connector's settings, dumping to ``partial``.

    The run must be the embedded default wherever the command runs: a deployment's ``CONNECTOR_*`` settings
    (a Kafka source, a config file) would make it read that deployment's topics. An archive the environment
    already maps cannot be dumped on top of: of ``SPARK_SUBMIT_OPTS`` only the other options are kept.
    """
    env = {name: value for name, value in environ.items() if not name.lstrip("_").startswith("CONNECTOR_")}
    inherited = _ARCHIVE_FLAG.sub("", env.get("SPARK_SUBMIT_OPTS", "")).strip()
    env["SPARK_SUBMIT_OPTS"] = f"{inherited} -XX:ArchiveClassesAtExit={partial}".strip()
    return env
