"""The chart against a real Kubernetes API server (etcd + kube-apiserver, ``deploy/local/kube-apiserver.sh``).

Every ``ci/`` values file is installed with ``helm install`` (the server validates every object, the
Prometheus operator's real CRDs included). In k8s mode the connector is started as the Spark driver, with
a token of the chart's service account and the chart's RBAC, and really creates its executor pods through
the API; without a kubelet they stay Pending, and the test reads them back.

What differs from a cluster: no controller manager, so the test creates the StatefulSet's pod ``<name>-0``
from its template (as the StatefulSet controller would) for the driver to find itself and own its executors;
and the driver runs on this machine, so the files the kubelet would mount into its pod (the service-account
token, the Spark authentication key, the executor pod template) are written to a temporary folder and the
rendered config points there, with the local API server's address, a local Kafka and a local landing zone.
"""

from __future__ import annotations

import base64
import functools
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from confluent_kafka.admin import AdminClient, NewTopic

from tests.deploy.kube_api import ApiError, KubeApi, helm_objects, kube_apiserver_sh
from tests.deploy.tooling import CHART, CI_VALUES, REPO, find_tool, run
from tests.support.dfs_server import DfsTestServer, make_onelake_storage, managed_identity_environment
from tests.support.fabric_api_double import TOKEN, FabricApiDouble

START_TIMEOUT_S = 180
KAFKA_SH = REPO / "deploy" / "local" / "kafka.sh"
CRDS = REPO / ".cache" / "crds"
K8S_VALUES = CHART / "ci" / "k8s-spark-values.yaml"
EXECUTOR_SELECTOR = "spark-role%3Dexecutor"
# Generous bounds for a shared 2-core machine: they only end a wait that would otherwise hang, never measure.
DRIVER_WAIT_S = 300
STOP_WAIT_S = 120


@pytest.fixture(scope="module")
def kube(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeApi]:
    find_tool_or_fail()
    state_dir = tmp_path_factory.mktemp("kube-apiserver")
    started = kube_apiserver_sh("start", state_dir, START_TIMEOUT_S)
    if started.returncode != 0:
        kube_apiserver_sh("stop", state_dir, 60)
        pytest.fail(f"kube-apiserver.sh start failed:\n{started.stdout}\n{started.stderr}", pytrace=False)
    assert started.stdout.strip() == f"kubeconfig={state_dir / 'kubeconfig'}"
    api = KubeApi.from_state(state_dir)
    try:
        install_monitoring_crds(api)
        yield api
    finally:
        stopped = kube_apiserver_sh("stop", state_dir, 90)
        assert stopped.returncode == 0, stopped.stderr
        assert kube_apiserver_sh("status", state_dir, 30).stdout.strip() == "stopped"


def find_tool_or_fail() -> None:
    if not (REPO / ".cache" / "bin" / "kube-apiserver").is_file() or not CRDS.is_dir():
        pytest.fail("kube-apiserver not built: run `deploy/local/tools.sh install-kube-apiserver`", pytrace=False)


def install_monitoring_crds(api: KubeApi) -> None:
    for path in sorted(CRDS.glob("*.yaml")):
        crd = yaml.safe_load(path.read_text())
        api.request("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd)
    for path in sorted(CRDS.glob("*.yaml")):
        name = yaml.safe_load(path.read_text())["metadata"]["name"]
        wait_for(functools.partial(established, api, name), f"CRD {name} established")


def established(api: KubeApi, name: str) -> bool:
    crd = api.get(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")
    conditions = crd.get("status", {}).get("conditions", [])
    return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)


def wait_for(condition: Callable[[], Any], what: str, timeout: float = DRIVER_WAIT_S) -> Any:
    """Poll until ``condition()`` is truthy; the bound only ends a hang (a failure), it measures nothing."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"gave up waiting for {what}", pytrace=False)
        time.sleep(1)


def helm(api: KubeApi, *args: str) -> subprocess.CompletedProcess[str]:
    return run([find_tool("helm"), "--kubeconfig", str(api.kubeconfig), *args])


def install(api: KubeApi, namespace: str, values: Path, *set_values: str) -> list[dict[str, Any]]:
    """``helm install`` into a fresh namespace; the objects as the server stored them."""
    args = ["install", "mirror", str(CHART), "-n", namespace, "--create-namespace", "-f", str(values)]
    for s in set_values:
        args += ["--set", s]
    result = helm(api, *args)
    assert result.returncode == 0, result.stdout + result.stderr
    # The server warns about fields it does not know (and drops them): none may be left.
    assert "unknown field" not in result.stderr, result.stderr
    manifest = helm(api, "get", "manifest", "mirror", "-n", namespace)
    assert manifest.returncode == 0, manifest.stderr
    return helm_objects(manifest.stdout)


@pytest.mark.parametrize("values", CI_VALUES, ids=[p.name for p in CI_VALUES])
def test_every_ci_values_file_installs(kube: KubeApi, values: Path) -> None:
    namespace = "ci-" + values.name.removesuffix("-values.yaml")[:40]
    objects = install(kube, namespace, values)
    assert objects
    for obj in objects:
        kind, name = obj["kind"], obj["metadata"]["name"]
        stored = kube.get(resource_path(obj, namespace))
        assert (stored["kind"], stored["metadata"]["name"]) == (kind, name)
        assert stored["metadata"]["labels"]["app.kubernetes.io/instance"] == "mirror"


PLURAL = {
    "ConfigMap": "configmaps",
    "Service": "services",
    "ServiceAccount": "serviceaccounts",
    "StatefulSet": "statefulsets",
    "Role": "roles",
    "RoleBinding": "rolebindings",
    "NetworkPolicy": "networkpolicies",
    "ServiceMonitor": "servicemonitors",
    "PrometheusRule": "prometheusrules",
}


def resource_path(obj: dict[str, Any], namespace: str) -> str:
    api_version = obj["apiVersion"]
    prefix = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
    return f"{prefix}/namespaces/{namespace}/{PLURAL[obj['kind']]}/{obj['metadata']['name']}"


def test_server_rejects_an_invalid_object(kube: KubeApi) -> None:
    """The installs above mean something: the server refuses what its schema refuses."""
    namespace = "ci-invalid"
    kube.create_namespace(namespace)
    bad = {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": "bad"},
        "spec": {"podSelector": {}, "ingress": [{"ports": [{"port": 7078, "protocol": "SCTPX"}]}]},
    }
    with pytest.raises(ApiError) as raised:
        kube.request("POST", f"/apis/networking.k8s.io/v1/namespaces/{namespace}/networkpolicies", bad)
    assert raised.value.status == 422


# ---- the connector as the Spark driver -------------------------------------------------------------------


@pytest.fixture(scope="module")
def kafka_bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    state_dir = tmp_path_factory.mktemp("kafka")
    env = dict(os.environ, STATE_DIR=str(state_dir))
    started = subprocess.run(
        ["bash", str(KAFKA_SH), "start"], env=env, capture_output=True, text=True, timeout=600, check=False
    )
    try:
        assert started.returncode == 0, started.stderr
        bootstrap = started.stdout.strip().removeprefix("bootstrap.servers=")
        admin = AdminClient({"bootstrap.servers": bootstrap})
        futures = admin.create_topics([NewTopic("bigdb.public.orders", num_partitions=2, replication_factor=1)])
        futures["bigdb.public.orders"].result(timeout=60)
        yield bootstrap
    finally:
        subprocess.run(["bash", str(KAFKA_SH), "stop"], env=env, capture_output=True, timeout=120, check=False)


class Driver:
    """The connector process started as the release's Spark driver (``python -m connector run``)."""

    def __init__(self, process: subprocess.Popen[bytes], log: Path) -> None:
        self.process = process
        self.log = log

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                return self.process.wait(timeout=STOP_WAIT_S)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
                pytest.fail(f"the driver did not stop on SIGTERM:\n{self.output()[-4000:]}", pytrace=False)
        return self.process.returncode


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def start_driver(kube: KubeApi, namespace: str, kafka: str, work: Path, auth_key: str) -> tuple[Driver, dict[str, Any]]:
    """Create the StatefulSet's pod and start the connector with the installed ConfigMap as its config."""
    sts = kube.get(f"/apis/apps/v1/namespaces/{namespace}/statefulsets/mirror-debezium-fabric-mirror")
    name = sts["metadata"]["name"]
    template = sts["spec"]["template"]
    spec = dict(template["spec"])
    claim = sts["spec"]["volumeClaimTemplates"][0]["metadata"]["name"]
    spec["volumes"] = [*spec["volumes"], {"name": claim, "persistentVolumeClaim": {"claimName": f"{claim}-{name}-0"}}]
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"{name}-0", "labels": template["metadata"]["labels"]},
        "spec": spec,
    }
    driver_pod = kube.request("POST", f"/api/v1/namespaces/{namespace}/pods", pod)

    config_map = kube.get(f"/api/v1/namespaces/{namespace}/configmaps/{name}")["data"]
    config = yaml.safe_load(config_map["config.yaml"])
    conf = config["spark"]["conf"]
    # What the kubelet would mount into the driver pod: the service account's token, the key, the template.
    token = work / "token"
    token.write_text(kube.service_account_token(namespace, spec["serviceAccountName"]))
    key_file = work / "spark-auth"
    key_file.write_text(auth_key)
    pod_template = work / "executor-pod-template.yaml"
    pod_template.write_text(config_map["executor-pod-template.yaml"])
    assert conf["spark.kubernetes.executor.podTemplateFile"].endswith("/executor-pod-template.yaml")
    config["spark"]["master"] = "k8s://" + kube.url
    conf.update(
        {
            "spark.kubernetes.executor.podTemplateFile": str(pod_template),
            "spark.authenticate.secret.driver.file": str(key_file),
            "spark.kubernetes.authenticate.oauthTokenFile": str(token),
            "spark.kubernetes.authenticate.caCertFile": str(kube.ca_file),
            "spark.driver.host": "127.0.0.1",
            "spark.driver.port": str(free_port()),
            "spark.driver.blockManager.port": str(free_port()),
            "spark.driver.memory": "1g",
            # No kubelet runs the executors: Spark's start-up would wait 30 s (its Kubernetes default) for them.
            "spark.scheduler.maxRegisteredResourcesWaitingTime": "1s",
        }
    )
    config["source"]["bootstrap_servers"] = kafka
    config["landing_zone"]["url"] = str(work / "landing")
    config["checkpoint"] = str(work / "checkpoint")
    config["metrics"]["port"] = free_port()
    (work / "landing").mkdir()
    (work / "checkpoint").mkdir()
    config_file = work / "config.yaml"
    config_file.write_text(yaml.safe_dump(config))
    log = work / "driver.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CONNECTOR_", "AZURE_", "KUBECONFIG"))}
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "connector", "run", "--config", str(config_file)],
            cwd=work,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    return Driver(process, log), driver_pod


def executor_pods(kube: KubeApi, namespace: str) -> list[dict[str, Any]]:
    return kube.pods(namespace, EXECUTOR_SELECTOR)


def prepare_release(kube: KubeApi, namespace: str, auth_key: str, azure_secret: str) -> list[dict[str, Any]]:
    kube.create_namespace(namespace)
    kube.create_secret(
        namespace,
        "bigdb-azure",
        {"AZURE_CLIENT_ID": "app", "AZURE_TENANT_ID": "tenant", "AZURE_CLIENT_SECRET": azure_secret},
    )
    kube.create_secret(namespace, "bigdb-spark-auth", {"secret": auth_key})
    # The k8s example as is, except a plaintext local Kafka and a service principal whose secret the executors
    # receive by reference.
    return install(
        kube,
        namespace,
        K8S_VALUES,
        "kafka.security.protocol=PLAINTEXT",
        "identity.type=servicePrincipalSecret",
        "identity.servicePrincipal.existingSecret=bigdb-azure",
    )


def test_driver_creates_executor_pods_as_the_chart_says(kube: KubeApi, kafka_bootstrap: str, tmp_path: Path) -> None:
    namespace = "spark"
    auth_key, azure_secret = secrets.token_hex(32), secrets.token_hex(16)
    objects = prepare_release(kube, namespace, auth_key, azure_secret)
    values = yaml.safe_load(K8S_VALUES.read_text())
    sa_name = next(o for o in objects if o["kind"] == "ServiceAccount")["metadata"]["name"]
    rendered = yaml.safe_load(next(o for o in objects if o["kind"] == "ConfigMap")["data"]["config.yaml"])
    key_file = rendered["spark"]["conf"]["spark.authenticate.secret.executor.file"]

    driver, driver_pod = start_driver(kube, namespace, kafka_bootstrap, tmp_path, auth_key)
    try:
        instances = values["spark"]["k8s"]["executor"]["instances"]

        def all_created() -> list[dict[str, Any]] | None:
            if driver.process.poll() is not None:
                pytest.fail(f"the driver exited ({driver.process.returncode}):\n{driver.output()[-6000:]}")
            pods = executor_pods(kube, namespace)
            return pods if len(pods) == instances else None

        pods = wait_for(all_created, f"{instances} executor pods")
    finally:
        exit_code = driver.stop()

    image = f"{values['image']['repository']}:{values['image']['tag']}"
    for pod in pods:
        assert pod["status"]["phase"] == "Pending"  # no kubelet
        meta, spec = pod["metadata"], pod["spec"]
        assert meta["labels"]["app.kubernetes.io/instance"] == "mirror"
        assert meta["labels"]["app.kubernetes.io/component"] == "spark-executor"
        (owner,) = meta["ownerReferences"]
        assert (owner["kind"], owner["uid"]) == ("Pod", driver_pod["metadata"]["uid"])
        assert spec["serviceAccountName"] == sa_name
        assert spec["automountServiceAccountToken"] is False
        assert spec["securityContext"]["runAsNonRoot"] is True
        assert spec["securityContext"]["runAsUser"] == 10001
        assert spec["imagePullSecrets"] == [{"name": "acr-pull"}]
        assert spec["nodeSelector"] == {"agentpool": "spark"}
        (container,) = spec["containers"]
        assert container["image"] == image
        assert container["args"] == ["executor"]
        security = container["securityContext"]
        assert security["readOnlyRootFilesystem"] is True
        assert security["allowPrivilegeEscalation"] is False
        assert security["capabilities"] == {"drop": ["ALL"]}
        volumes = {v["name"]: v for v in spec["volumes"]}
        mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
        # The working directory, where the executor copies spark.jars, is a writable emptyDir.
        work = mounts[container["workingDir"]]
        assert "emptyDir" in volumes[work["name"]] and not work.get("readOnly", False)
        assert "emptyDir" in volumes[mounts["/tmp"]["name"]]
        key_mount = mounts[key_file.rsplit("/", 1)[0]]
        assert key_mount["readOnly"] is True
        assert volumes[key_mount["name"]]["secret"]["secretName"] == "bigdb-spark-auth"
        assert not any(v.get("projected") for v in spec["volumes"]), "no API token in executors"
        env = {e["name"]: e for e in container["env"]}
        assert env["AZURE_CLIENT_SECRET"]["valueFrom"]["secretKeyRef"] == {
            "name": "bigdb-azure",
            "key": "AZURE_CLIENT_SECRET",
        }
        assert "SPARK_AUTH_SECRET" not in env
        java_opts = {e["value"] for name, e in env.items() if name.startswith("SPARK_JAVA_OPT_")}
        assert {"-Dspark.authenticate=true", "-Dspark.network.crypto.enabled=true"} <= java_opts
        assert f"-Dspark.authenticate.secret.executor.file={key_file}" in java_opts
        # Memory limit = executor heap + overhead from the example (2g + 3g).
        assert container["resources"]["limits"]["memory"] == "5Gi"  # 5120Mi as the server writes it
        text = json.dumps(pod)
        for secret in (auth_key, azure_secret, (tmp_path / "token").read_text()):
            assert secret not in text

    assert exit_code == 0, driver.output()[-6000:]
    # The driver deletes its executors when it stops (the Role's delete verbs).
    assert executor_pods(kube, namespace) == []


def test_role_missing_a_verb_stops_the_executors(kube: KubeApi, kafka_bootstrap: str, tmp_path: Path) -> None:
    """The test above depends on the chart's RBAC: without ``create`` the driver gets no executor."""
    namespace = "spark-no-create"
    auth_key = secrets.token_hex(32)
    objects = prepare_release(kube, namespace, auth_key, secrets.token_hex(16))
    role = next(o for o in objects if o["kind"] == "Role")
    rules = [dict(r, verbs=[v for v in r["verbs"] if v != "create"]) for r in role["rules"]]
    path = f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/roles/{role['metadata']['name']}"
    kube.request("PATCH", path, {"rules": rules})

    driver, _ = start_driver(kube, namespace, kafka_bootstrap, tmp_path, auth_key)
    try:

        def forbidden() -> str | None:
            text = driver.output()
            return text if 'cannot create resource "pods"' in text or driver.process.poll() is not None else None

        output = wait_for(forbidden, "the driver's Forbidden error")
    finally:
        driver.stop()
    assert 'pods is forbidden: User "system:serviceaccount:spark-no-create:' in output, output[-4000:]
    assert executor_pods(kube, namespace) == []


# ---- the init container creates the database (init.name): an empty workspace to a running mirror ----------------

INIT_CREATE_VALUES = CHART / "ci" / "init-create-values.yaml"


def container_env(kube: KubeApi, namespace: str, container: dict[str, Any]) -> dict[str, str]:
    """The container's env as the kubelet would resolve it (values, and secretKeyRefs read from the API)."""
    env: dict[str, str] = {}
    for entry in container.get("env", []):
        if "value" in entry:
            env[entry["name"]] = entry["value"]
        elif "secretKeyRef" in entry.get("valueFrom", {}):
            ref = entry["valueFrom"]["secretKeyRef"]
            data = kube.get(f"/api/v1/namespaces/{namespace}/secrets/{ref['name']}")["data"]
            env[entry["name"]] = base64.b64decode(data[ref["key"]]).decode()
    return env


def test_init_container_creates_starts_and_proves_a_database_from_an_empty_workspace(
    kube: KubeApi, kafka_bootstrap: str, dfs_server: DfsTestServer, tmp_path: Path
) -> None:
    """``helm install`` with init.name, then the init container run as the kubelet would run it (no kubelet here):
    against the Fabric API double (an empty workspace) and the OneLake DFS double, it creates the database, waits
    until it can be started, starts it, proves the landing zone and writes the config the connector container reads.
    """
    namespace = "init-create"
    kube.create_namespace(namespace)
    kube.create_secret(namespace, "fabric-token", {"token": TOKEN})
    workspace = yaml.safe_load(INIT_CREATE_VALUES.read_text())["fabricStatus"]["workspaceId"]
    with FabricApiDouble(workspace_id=workspace, with_item=False) as fabric:
        fabric.initializing_reads = 2
        fabric.lro_polls = 1

        def provision(ws: str, item: str) -> None:  # Fabric makes the item's Files/LandingZone
            with make_onelake_storage(dfs_server, f"{item}/Files/LandingZone", filesystem=ws) as storage:
                storage.check(create_root=True, probe_write=False)

        fabric.on_created = provision
        install(
            kube,
            namespace,
            INIT_CREATE_VALUES,
            "kafka.security.protocol=PLAINTEXT",
            "identity.type=managedIdentity",
            "fabricStatus.bearerTokenSecret.name=fabric-token",
            f"init.onelakeUrl={dfs_server.url}",
        )
        result, written = run_init_container(kube, namespace, fabric, kafka_bootstrap, dfs_server, tmp_path)
        assert result.returncode == 0, result.stdout + result.stderr
        [item] = fabric.items.values()
        assert (item.display_name, item.status) == ("Sales mirror", "Running")
        assert item.mirroring["properties"]["target"]["typeProperties"]["enableDeltaChangeDataFeed"] is True
        assert "Initializing; next check in" in result.stderr
        assert len(fabric.calls("POST", "/startMirroring")) == 1
    url = f"{dfs_server.url}/{workspace}/{item.id}/Files/LandingZone"
    assert written["landing_zone"]["url"] == url
    assert written["fabric_status"]["mirrored_database_id"] == item.id
    assert written["fabric_status"]["workspace_id"] == workspace
    assert dfs_server.file_bytes(workspace, f"{item.id}/Files/LandingZone/_partnerEvents.json")
    assert TOKEN not in result.stdout + result.stderr


def run_init_container(
    kube: KubeApi, namespace: str, fabric: FabricApiDouble, kafka: str, dfs_server: DfsTestServer, work: Path
) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    """The StatefulSet's init container run here: its args and env, its mounts mapped to folders under ``work``."""
    sts = kube.get(f"/apis/apps/v1/namespaces/{namespace}/statefulsets/mirror-debezium-fabric-mirror")
    spec = sts["spec"]["template"]["spec"]
    (init,) = spec["initContainers"]
    connector = spec["containers"][0]
    config_map = kube.get(f"/api/v1/namespaces/{namespace}/configmaps/{sts['metadata']['name']}")["data"]
    config = yaml.safe_load(config_map["config.yaml"])
    # What differs on this machine: a local Kafka, and the Fabric API double's URL (values refuse plain http).
    config["source"]["bootstrap_servers"] = kafka
    config["fabric_status"]["api_url"] = fabric.api_url
    mounts = {m["name"]: m["mountPath"] for m in init["volumeMounts"]}
    local = {mounts["config"]: work / "config", mounts["init-config"]: work / "init"}
    for folder in local.values():
        folder.mkdir()
    (local[mounts["config"]] / "config.yaml").write_text(yaml.safe_dump(config))
    folder_of = {a: a.rsplit("/", 1)[0] for a in init["args"]}
    args = [str(local[folder_of[a]] / "config.yaml") if folder_of[a] in local else a for a in init["args"]]
    # The connector container reads what the init container writes (the same emptyDir).
    run_config = connector["args"][connector["args"].index("--config") + 1]
    assert run_config.rsplit("/", 1)[0] == mounts["init-config"]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CONNECTOR_", "AZURE_", "KUBECONFIG"))}
    env.update(container_env(kube, namespace, init))
    env.update(managed_identity_environment(dfs_server))
    result = subprocess.run(
        [sys.executable, "-m", "connector", *args],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=DRIVER_WAIT_S,
        check=False,
    )
    written_file = work / "init" / "config.yaml"
    written = yaml.safe_load(written_file.read_text()) if written_file.exists() else {}
    return result, written
