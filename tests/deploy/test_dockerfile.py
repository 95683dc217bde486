"""The container image and the compose stack, as far as this machine allows without a Docker engine.

`test_replay_dockerfile_run_steps` executes every RUN step of deploy/Dockerfile, in order, with the build
context and COPY instructions emulated under a temporary root. Commands are run as written by /bin/sh; only
absolute image paths are moved under that root (so `rm -rf /var/lib/apt/lists/*` cannot touch this
machine) and three tools are wrapped: `apt-get install` becomes `apt-get install --simulate` (this
machine's packages stay as they are; `apt-get update` runs for real), and groupadd/useradd get
`--prefix <root>`. ENV is not applied to RUN steps (PIP_NO_CACHE_DIR would defeat the local pip cache).
"""

from __future__ import annotations

import glob
import os
import re
import shlex
import shutil
import stat
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from tests.deploy.tooling import REPO, run

DOCKERFILE = REPO / "deploy" / "Dockerfile"
ENTRYPOINT = REPO / "deploy" / "image" / "entrypoint.sh"
COMPOSE = REPO / "deploy" / "docker-compose.yml"

# Absolute paths of the image that the replay relocates under its root, and those used as they are.
RELOCATED = ("/opt", "/jars", "/data", "/etc/connector", "/var/lib/apt/lists", "/usr/share/man", "/src")
# /home/connector and /usr/sbin/nologin are arguments of useradd, which resolves them under --prefix.
KEPT = ("/usr/bin/java", "/dev/null", "/home/connector", "/usr/sbin/nologin")


@dataclass
class Instruction:
    keyword: str
    args: str


@dataclass
class Stage:
    image: str
    name: str | None
    instructions: list[Instruction] = field(default_factory=list)


def parse_dockerfile(text: str) -> tuple[dict[str, str], list[Stage]]:
    """Global ARG defaults and the stages (continuation lines joined, comments dropped)."""
    logical: list[str] = []
    buffer = ""
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("#") or (not stripped and not buffer):
            continue
        if line.rstrip().endswith("\\"):
            buffer += line.rstrip()[:-1]
            continue
        logical.append((buffer + line).strip())
        buffer = ""
    global_args: dict[str, str] = {}
    stages: list[Stage] = []
    for entry in logical:
        keyword, _, rest = entry.partition(" ")
        instruction = Instruction(keyword.upper(), rest.strip())
        if instruction.keyword == "FROM":
            parts = instruction.args.split()
            image = expand(parts[0], global_args)
            stages.append(Stage(image, parts[2] if len(parts) == 3 and parts[1].upper() == "AS" else None))
        elif not stages:
            assert instruction.keyword == "ARG", entry
            name, _, default = instruction.args.partition("=")
            global_args[name] = default
        else:
            stages[-1].instructions.append(instruction)
    return global_args, stages


def expand(text: str, variables: dict[str, str]) -> str:
    return re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: variables.get(m[1] or m[2], m[0]), text)


def final_stage() -> Stage:
    return parse_dockerfile(DOCKERFILE.read_text())[1][-1]


def values_of(stage: Stage, keyword: str) -> list[str]:
    return [i.args for i in stage.instructions if i.keyword == keyword]


def test_hadolint(hadolint: str) -> None:
    result = run([hadolint, "--failure-threshold", "info", str(DOCKERFILE)])
    assert result.returncode == 0, result.stdout + result.stderr


def test_base_images_are_pinned() -> None:
    _, stages = parse_dockerfile(DOCKERFILE.read_text())
    for stage in stages:
        assert ":" in stage.image and not stage.image.endswith(":latest"), stage.image
    assert stages[-1].image.startswith("python:3.11-"), "the runtime is Python 3.11"


def test_runtime_stage_structure() -> None:
    stage = final_stage()
    args = dict(a.partition("=")[::2] for a in values_of(stage, "ARG"))
    user = expand(values_of(stage, "USER")[-1], args)
    assert re.fullmatch(r"[1-9][0-9]*:[1-9][0-9]*", user), f"USER must be numeric and non-root: {user}"
    assert values_of(stage, "ENTRYPOINT") == ['["/usr/bin/tini", "--", "/opt/connector/entrypoint.sh"]']
    assert values_of(stage, "CMD") == ['["run", "--config", "/etc/connector/config.yaml"]']
    assert values_of(stage, "EXPOSE") == ["9464"]
    healthcheck = values_of(stage, "HEALTHCHECK")
    assert healthcheck and "/healthz" in healthcheck[0]
    env = " ".join(values_of(stage, "ENV"))
    assert "CONNECTOR_SPARK_JARS_DIR=/opt/connector/jars" in env
    assert any(c.endswith("/opt/connector/jars/") for c in values_of(stage, "COPY")), "jars are baked in"


def test_copy_sources_exist() -> None:
    _, stages = parse_dockerfile(DOCKERFILE.read_text())
    for stage in stages:
        for copy in values_of(stage, "COPY"):
            parts = shlex.split(copy)
            if parts[0].startswith("--from="):
                continue
            for source in parts[:-1]:
                assert (REPO / source).exists(), f"COPY {source}: not in the build context"


def test_entrypoint_scripts_parse() -> None:
    for script in (ENTRYPOINT, REPO / "deploy" / "local" / "tools.sh"):
        assert os.access(script, os.X_OK), f"{script} must be executable"
        result = run(["bash", "-n", str(script)])
        assert result.returncode == 0, result.stderr


def _stub(path: Path, body: str) -> None:
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)


def test_entrypoint_runs_the_connector(tmp_path: Path) -> None:
    _stub(tmp_path / "python", 'printf "%s\\n" "$@"\n')
    env = {"PATH": f"{tmp_path}:/usr/bin:/bin"}
    result = run([str(ENTRYPOINT), "run", "--config", "/etc/connector/config.yaml"], env=env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["-m", "connector", "run", "--config", "/etc/connector/config.yaml"]


def test_entrypoint_starts_spark_executors(tmp_path: Path) -> None:
    """Spark on Kubernetes runs executor pods from this image with the argument `executor`."""
    java_home = tmp_path / "java"
    (java_home / "bin").mkdir(parents=True)
    _stub(java_home / "bin" / "java", 'printf "%s\\n" "$@"\n')
    env = {
        "PATH": "/usr/bin:/bin",
        "JAVA_HOME": str(java_home),
        "SPARK_HOME": "/opt/venv/lib/python3.11/site-packages/pyspark",
        "CONNECTOR_SPARK_JARS_DIR": "/opt/connector/jars",
        "SPARK_EXECUTOR_MEMORY": "2g",
        "SPARK_DRIVER_URL": "spark://CoarseGrainedScheduler@mirror-headless.cdc.svc:7078",
        "SPARK_EXECUTOR_ID": "3",
        "SPARK_EXECUTOR_CORES": "2",
        "SPARK_APPLICATION_ID": "spark-application-1",
        "SPARK_EXECUTOR_POD_IP": "10.1.2.3",
        "SPARK_RESOURCE_PROFILE_ID": "0",
        "SPARK_EXECUTOR_POD_NAME": "mirror-exec-3",
        "SPARK_JAVA_OPT_10": "-Dten=1",
        "SPARK_JAVA_OPT_2": "-Dtwo=with space",
        "SPARK_JAVA_OPT_0": "-Dzero=1",
    }
    result = run([str(ENTRYPOINT), "executor"], env=env)
    assert result.returncode == 0, result.stderr
    argv = result.stdout.splitlines()
    assert argv[:5] == ["-Dzero=1", "-Dtwo=with space", "-Dten=1", "-Xms2g", "-Xmx2g"]
    assert argv[5:7] == ["-cp", "/opt/venv/lib/python3.11/site-packages/pyspark/jars/*:/opt/connector/jars/*"]
    assert argv[7] == "org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend"
    options = dict(zip(argv[8::2], argv[9::2], strict=True))
    assert options == {
        "--driver-url": env["SPARK_DRIVER_URL"],
        "--executor-id": "3",
        "--cores": "2",
        "--app-id": "spark-application-1",
        "--hostname": "10.1.2.3",
        "--resourceProfileId": "0",
        "--podName": "mirror-exec-3",
    }
    missing = run([str(ENTRYPOINT), "executor"], env={k: v for k, v in env.items() if k != "SPARK_DRIVER_URL"})
    assert missing.returncode != 0 and "SPARK_DRIVER_URL" in missing.stderr


class Replay:
    """Executes a Dockerfile's stages under `root`, emulating COPY and relocating image paths."""

    def __init__(self, root: Path, shims: Path) -> None:
        self.root = root
        self.shims = shims
        self.env = {
            "PATH": f"{shims}:{os.environ['PATH']}",
            "HOME": os.environ.get("HOME", "/root"),
            "LANG": "C.UTF-8",
        }

    def path(self, image_path: str) -> Path:
        return self.root / image_path.lstrip("/")

    def relocate(self, command: str) -> str:
        def replace(match: re.Match[str]) -> str:
            path = match[1]
            if path.startswith(KEPT):
                return path
            if path.startswith(RELOCATED):
                return str(self.root) + path
            pytest.fail(f"RUN uses {path}, unknown to the replay: add it to RELOCATED or KEPT", pytrace=False)

        return re.sub(r"(?<![\w.$/-])(/[A-Za-z0-9._*/-]+)", replace, command)

    def copy(self, args: str, workdir: str) -> None:
        parts = shlex.split(args)
        from_stage = parts[0].startswith("--from=")
        if from_stage:
            parts = parts[1:]
        *sources, dest = parts
        target = self.path(dest if dest.startswith("/") else f"{workdir}/{dest}")
        for source in sources:
            matches = sorted(glob.glob(str(self.path(source)))) if from_stage else sorted(glob.glob(str(REPO / source)))
            assert matches, f"COPY {source}: nothing to copy"
            for match in map(Path, matches):
                destination = target / match.name if dest.endswith("/") and match.is_file() else target
                if match.resolve() == destination.resolve():
                    continue  # COPY --from a stage of the same path: the replay shares one root
                destination.parent.mkdir(parents=True, exist_ok=True)
                if match.is_dir():
                    shutil.copytree(match, destination, dirs_exist_ok=True, symlinks=True)
                else:
                    shutil.copy2(match, destination)

    def run_stage(self, stage: Stage, global_args: dict[str, str]) -> None:
        workdir = "/"
        variables = dict(global_args)
        for instruction in stage.instructions:
            if instruction.keyword == "ARG":
                name, _, default = instruction.args.partition("=")
                variables[name] = default
            elif instruction.keyword == "WORKDIR":
                workdir = instruction.args
                self.path(workdir).mkdir(parents=True, exist_ok=True)
            elif instruction.keyword == "COPY":
                self.copy(instruction.args, workdir)
            elif instruction.keyword == "RUN":
                command = re.sub(r"^(--mount=\S+\s+)+", "", instruction.args)
                result = subprocess.run(
                    ["/bin/sh", "-c", self.relocate(command)],
                    cwd=self.path(workdir),
                    env={**self.env, **variables},
                    capture_output=True,
                    text=True,
                    timeout=1800,
                    check=False,
                )
                assert result.returncode == 0, f"RUN {command}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"


def make_shims(shims: Path, root: Path) -> None:
    shims.mkdir()
    base_python = getattr(sys, "_base_executable", sys.executable)
    _stub(shims / "python", f'exec "{base_python}" "$@"\n')
    _stub(
        shims / "apt-get",
        'case "$1" in\n'
        "  update) exec /usr/bin/apt-get update -qq ;;\n"
        '  install) shift; exec /usr/bin/apt-get install --simulate "$@" ;;\n'
        '  *) echo "replay: unexpected apt-get $1" >&2; exit 1 ;;\n'
        "esac\n",
    )
    for tool in ("groupadd", "useradd"):
        _stub(shims / tool, f'exec /usr/sbin/{tool} --prefix "{root}" "$@"\n')


def test_replay_dockerfile_run_steps(tmp_path: Path) -> None:
    base_python = getattr(sys, "_base_executable", sys.executable)
    version = run([base_python, "-c", "import sys; print(sys.version_info[:2])"]).stdout.strip()
    assert version == "(3, 11)", f"the image runs Python 3.11; this interpreter is {version}"
    if os.geteuid() != 0:
        pytest.fail("the replay runs chown and useradd --prefix: run it as root (CI does)", pytrace=False)

    root = tmp_path / "root"
    (root / "etc").mkdir(parents=True)
    for name in ("passwd", "group", "shadow", "gshadow", "login.defs"):
        shutil.copy2(Path("/etc") / name, root / "etc" / name)
    shims = tmp_path / "shims"
    make_shims(shims, root)
    replay = Replay(root, shims)

    global_args, stages = parse_dockerfile(DOCKERFILE.read_text())
    for stage in stages:
        replay.run_stage(stage, global_args)

    # What the runtime image would contain.
    env: dict[str, str] = {}
    for entry in values_of(stages[-1], "ENV"):
        for token in shlex.split(entry):
            name, _, value = token.partition("=")
            env[name] = value
    java = replay.path(env["JAVA_HOME"]) / "bin" / "java"
    version_out = run([str(java), "-version"])
    assert version_out.returncode == 0 and 'version "17.' in version_out.stderr, version_out.stderr

    spark_home = replay.path(env["SPARK_HOME"])
    assert list((spark_home / "jars").glob("spark-core_2.13-*.jar")), "SPARK_HOME does not point at pyspark"
    jars = {p.name for p in replay.path(env["CONNECTOR_SPARK_JARS_DIR"]).glob("*.jar")}
    assert any(j.startswith("spark-sql-kafka-0-10_2.13-") for j in jars), jars
    assert any(j.startswith("kafka-clients-") for j in jars), jars

    python = replay.path(env["PYSPARK_PYTHON"])
    check = run([str(python), "-c", "import connector, pyspark, pyarrow; print(pyspark.__version__)"])
    assert check.returncode == 0, check.stderr

    passwd = (root / "etc" / "passwd").read_text()
    assert re.search(r"^connector:x:10001:10001:[^:]*:/home/connector:/usr/sbin/nologin$", passwd, re.MULTILINE)
    for owned in ("home/connector", "data"):
        assert (root / owned).stat().st_uid == 10001, owned
    # The driver's class archive, written by the image's own Java and venv (connector/spark/class_archive.py).
    assert replay.path(env["CONNECTOR_SPARK__CLASS_ARCHIVE"]).stat().st_size > 1 << 20
    entrypoint = replay.path("/opt/connector/entrypoint.sh")
    assert entrypoint.stat().st_mode & stat.S_IXUSR


def test_compose_stack() -> None:
    compose = yaml.safe_load(COMPOSE.read_text())
    services = compose["services"]
    assert {"postgres", "kafka", "connect", "register-connector", "mirror", "prometheus", "grafana"} <= set(services)
    for name, service in services.items():
        image = service.get("image", "")
        assert ":" in image and not image.endswith(":latest"), f"{name}: pin the image tag ({image})"
        for volume in service.get("volumes", []):
            source = volume.split(":")[0]
            if source.startswith("."):
                assert (COMPOSE.parent / source).exists(), f"{name}: {source} does not exist"
    assert "wal_level=logical" in services["postgres"]["command"]
    assert services["kafka"]["environment"]["KAFKA_PROCESS_ROLES"] == "broker,controller"
    assert services["mirror"]["build"] == {"context": "..", "dockerfile": "deploy/Dockerfile"}
    assert services["mirror"]["deploy"]["replicas"] == 1
    prometheus = yaml.safe_load((REPO / "deploy" / "prometheus" / "prometheus.yml").read_text())
    targets = [t for c in prometheus["scrape_configs"] for s in c["static_configs"] for t in s["targets"]]
    assert "mirror:9464" in targets


def test_compose_configs_pass_check_config(tmp_path: Path) -> None:
    config = REPO / "deploy" / "compose" / "connector.yaml"
    result = run([sys.executable, "-m", "connector", "check-config", str(config)], cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    data = yaml.safe_load(config.read_text())
    assert data["source"]["bootstrap_servers"] == "kafka:9092"
    debezium = yaml.safe_load((REPO / "deploy" / "compose" / "debezium-postgres.json").read_text())
    assert re.fullmatch(data["source"]["topics"], f"{debezium['topic.prefix']}.inventory.customers")
    assert "${file:" in debezium["database.password"], "no password in the connector config"
