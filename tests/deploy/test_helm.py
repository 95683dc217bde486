"""The Helm chart: lint, render, Kubernetes schema validation and the deployment invariants."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import kubernetes_validate  # type: ignore[import-untyped]
import pytest
import yaml

from tests.deploy.tooling import CHART, CI_VALUES, PROMETHEUS_DIR, Render, run

# Oldest Kubernetes the chart supports (Chart.yaml kubeVersion) and the newest bundled schema set.
K8S_VERSIONS = ("1.27", kubernetes_validate.latest_version())
CRD_KINDS = {"ServiceMonitor", "PrometheusRule"}
REQUIRED_CI_FILES = {
    "minimal-values.yaml",
    "onelake-workload-identity-values.yaml",
    "sasl-kafka-values.yaml",
    "k8s-spark-values.yaml",
    "service-principal-secret-values.yaml",
    "fabric-status-values.yaml",
}
SENSITIVE_ENV = re.compile(r"PASSWORD|SECRET|TOKEN|JAAS|CREDENTIAL|PRIVATE", re.IGNORECASE)
CONFIG_PATH = "/etc/connector/config/config.yaml"
#: Create mode (init.name): the config the init container writes for run, in an emptyDir.
INIT_CONFIG_PATH = "/etc/connector/init/config.yaml"
ci = pytest.mark.parametrize("values", CI_VALUES, ids=[p.name for p in CI_VALUES])


def ci_file(name: str) -> Path:
    path: Path = CHART / "ci" / name
    return path


def by_kind(objects: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] == kind]


def one(objects: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    found = by_kind(objects, kind)
    assert len(found) == 1, f"expected one {kind}, got {len(found)}"
    return found[0]


def connector_config(objects: list[dict[str, Any]]) -> dict[str, Any]:
    config: dict[str, Any] = yaml.safe_load(one(objects, "ConfigMap")["data"]["config.yaml"])
    return config


def executor_template(objects: list[dict[str, Any]]) -> dict[str, Any] | None:
    text = one(objects, "ConfigMap")["data"].get("executor-pod-template.yaml")
    return yaml.safe_load(text) if text else None


def pod_specs(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The driver pod spec and, in k8s mode, the executor pod template."""
    specs = [one(objects, "StatefulSet")["spec"]["template"]["spec"]]
    template = executor_template(objects)
    if template:
        specs.append(template["spec"])
    return specs


def test_example_values_present() -> None:
    assert REQUIRED_CI_FILES <= {p.name for p in CI_VALUES}


@ci
def test_lint_strict(helm: str, values: Path) -> None:
    result = run([helm, "lint", "--strict", str(CHART), "-f", str(values)])
    assert result.returncode == 0, result.stdout + result.stderr


@ci
@pytest.mark.parametrize("k8s_version", K8S_VERSIONS)
def test_manifests_match_kubernetes_schemas(render: Render, values: Path, k8s_version: str) -> None:
    objects = render(values)
    checked = 0
    for obj in objects:
        if obj["kind"] in CRD_KINDS:
            continue
        kubernetes_validate.validate(obj, k8s_version, strict=True)
        checked += 1
    template = executor_template(objects)
    if template:
        kubernetes_validate.validate(template, k8s_version, strict=True)
    assert checked >= 5


@ci
def test_exactly_one_replica_by_construction(render: Render, values: Path) -> None:
    objects = render(values)
    assert not {"Deployment", "ReplicaSet", "DaemonSet", "Job", "CronJob"} & {o["kind"] for o in objects}
    sts = one(objects, "StatefulSet")
    assert sts["spec"]["replicas"] == 1
    assert sts["spec"]["podManagementPolicy"] == "OrderedReady"
    assert not by_kind(objects, "HorizontalPodAutoscaler")


def test_replicas_is_not_a_value() -> None:
    statefulset = (CHART / "templates" / "statefulset.yaml").read_text()
    assert re.search(r"^\s+replicas: 1$", statefulset, re.MULTILINE)

    def keys(node: Any) -> set[str]:
        if isinstance(node, dict):
            return set(node) | set().union(*(keys(v) for v in node.values()))
        if isinstance(node, list):
            return set().union(*(keys(v) for v in node))
        return set()

    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert not [k for k in keys(values) if "replica" in k.lower()]


@ci
def test_runs_as_non_root_with_read_only_root_fs(render: Render, values: Path) -> None:
    for spec in pod_specs(render(values)):
        assert spec["securityContext"]["runAsNonRoot"] is True
        assert spec["securityContext"]["runAsUser"] > 0
        for container in spec["containers"]:
            ctx = container["securityContext"]
            assert ctx["runAsNonRoot"] is True
            assert ctx["readOnlyRootFilesystem"] is True
            assert ctx["allowPrivilegeEscalation"] is False
            assert ctx["capabilities"]["drop"] == ["ALL"]
            tmp = [m for m in container["volumeMounts"] if m["mountPath"] == "/tmp"]
            assert tmp, "read-only root filesystem needs a writable /tmp"
            volume = next(v for v in spec["volumes"] if v["name"] == tmp[0]["name"])
            assert "emptyDir" in volume


@ci
def test_probes_on_the_metrics_port(render: Render, values: Path) -> None:
    objects = render(values)
    container = one(objects, "StatefulSet")["spec"]["template"]["spec"]["containers"][0]
    port = connector_config(objects)["metrics"]["port"]
    named = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert named["metrics"] == port
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    creates = bool(yaml.safe_load(values.read_text()).get("init", {}).get("name"))
    assert container["args"] == ["run", "--config", INIT_CONFIG_PATH if creates else CONFIG_PATH]


@ci
def test_config_follows_the_connector_contract(render: Render, values: Path) -> None:
    objects = render(values)
    config = connector_config(objects)
    assert set(config) - {"fabric_status"} == {
        "source",
        "landing_zone",
        "checkpoint",
        "trigger",
        "metrics",
        "spark",
        "mirror",
    }
    assert set(config["source"]) - {"max_records_per_partition", "kafka_auth"} == {
        "kind",
        "bootstrap_servers",
        "topics",
        "starting_offsets",
        "max_offsets_per_trigger",
        "kafka_options",
    }
    assert config["source"]["kind"] == "kafka"
    assert isinstance(config["source"]["max_offsets_per_trigger"], int)
    assert isinstance(config["source"].get("max_records_per_partition", 1), int)
    if "kafka_auth" in config["source"]:  # Entra ID for Kafka: what the connector's settings take, no secret in it
        auth = config["source"]["kafka_auth"]
        assert auth["kind"] == "entra" and set(auth) <= {"kind", "credential", "scope"}
        credential = auth["credential"]
        kind = credential["kind"] if isinstance(credential, dict) else credential
        assert kind in {"default", "workload_identity", "managed_identity"}
    assert config["landing_zone"]["credential"] in {
        "default",
        "workload_identity",
        "managed_identity",
        "client_secret",
        "client_certificate",
    }
    assert re.fullmatch(r"[1-9][0-9]*(ms|s|m|h)", config["trigger"])
    assert set(config["mirror"]) == {
        "partner_name",
        "replay_safe_inserts",
        "initial_load",
        "truncate_policy",
        "toast_policy",
        "file_format",
        "on_table_stopped",
        "rebuild",
    }
    assert config["mirror"]["on_table_stopped"] in {"stay", "rebuild"}
    assert config["mirror"]["initial_load"] in {"marker-free", "upsert"}
    assert isinstance(config["mirror"]["rebuild"]["wait_s"], int | float)
    assert all(isinstance(v, str) for v in config["spark"]["conf"].values())
    assert all(isinstance(v, str) for v in config["source"]["kafka_options"].values())
    # The config is mounted where the container reads it.
    container = one(objects, "StatefulSet")["spec"]["template"]["spec"]["containers"][0]
    mount = next(m for m in container["volumeMounts"] if m["name"] == "config")
    assert CONFIG_PATH == mount["mountPath"] + "/config.yaml"


@ci
def test_checkpoint_storage(render: Render, values: Path) -> None:
    objects = render(values)
    checkpoint = connector_config(objects)["checkpoint"]
    sts = one(objects, "StatefulSet")
    container = sts["spec"]["template"]["spec"]["containers"][0]
    data_mount = [m for m in container["volumeMounts"] if m["name"] == "data"]
    # Always a mounted folder: `run` refuses a remote checkpoint, so the chart offers none.
    assert data_mount and checkpoint.startswith(data_mount[0]["mountPath"] + "/")
    claims = sts["spec"].get("volumeClaimTemplates", [])
    volumes = [v for v in sts["spec"]["template"]["spec"]["volumes"] if v["name"] == "data"]
    assert len(claims) + len(volumes) == 1
    if claims:
        assert sts["spec"]["persistentVolumeClaimRetentionPolicy"]["whenDeleted"] == "Retain"


@ci
def test_secrets_only_by_reference(render: Render, values: Path) -> None:
    objects = render(values)
    assert not by_kind(objects, "Secret"), "the chart must never carry secret values"
    for spec in pod_specs(objects):
        for container in spec["containers"]:
            env = container.get("env", [])
            from_secret = {e["name"] for e in env if "secretKeyRef" in e.get("valueFrom", {})}
            for var in env:
                if not SENSITIVE_ENV.search(var["name"]) or var["name"].endswith("_PATH"):
                    continue
                if "value" not in var:
                    assert "secretKeyRef" in var["valueFrom"], var
                    continue
                # A plain value is only allowed when every secret part is a $(VAR) reference to a secretKeyRef.
                refs = set(re.findall(r"\$\(([A-Z0-9_]+)\)", var["value"]))
                assert refs and refs <= from_secret, var
                assert re.search(r'password="\$\([A-Z0-9_]+\)"', var["value"]), var
    options = connector_config(objects)["source"]["kafka_options"]
    for key, value in options.items():
        if SENSITIVE_ENV.search(key):
            assert re.fullmatch(r"\$\{(env|file):[^}]+\}", value), (key, value)


@ci
def test_identity_wiring(render: Render, values: Path) -> None:
    objects = render(values)
    config = connector_config(objects)
    credential = config["landing_zone"]["credential"]
    sa = one(objects, "ServiceAccount")
    pod = one(objects, "StatefulSet")["spec"]["template"]
    container = pod["spec"]["containers"][0]
    env = {e["name"]: e for e in container["env"]}
    assert pod["spec"]["serviceAccountName"] == sa["metadata"]["name"]
    uses_wi = pod["metadata"]["labels"].get("azure.workload.identity/use") == "true"
    kafka_credential = config["source"].get("kafka_auth", {}).get("credential")
    kafka_wi = (
        (kafka_credential or {}).get("kind") == "workload_identity" if isinstance(kafka_credential, dict) else False
    )
    assert uses_wi == (credential == "workload_identity" or kafka_credential == "workload_identity" or kafka_wi)
    if uses_wi:
        assert re.fullmatch(r"[0-9a-f-]{36}", sa["metadata"]["annotations"]["azure.workload.identity/client-id"])
        template = executor_template(objects)
        if template:
            assert template["metadata"]["labels"]["azure.workload.identity/use"] == "true"
            assert template["spec"]["serviceAccountName"] == sa["metadata"]["name"]
    if credential in {"client_secret", "client_certificate"}:
        for name in ("AZURE_CLIENT_ID", "AZURE_TENANT_ID"):
            assert "secretKeyRef" in env[name]["valueFrom"]
    if credential == "client_secret":
        assert "secretKeyRef" in env["AZURE_CLIENT_SECRET"]["valueFrom"]
    if credential == "client_certificate":
        path = env["AZURE_CLIENT_CERTIFICATE_PATH"]["value"]
        mount = next(m for m in container["volumeMounts"] if path.startswith(m["mountPath"] + "/"))
        volume = next(v for v in pod["spec"]["volumes"] if v["name"] == mount["name"])
        assert volume["secret"]["items"][0]["path"] == path.rsplit("/", 1)[1]
    else:
        assert "AZURE_CLIENT_CERTIFICATE_PATH" not in env


def test_workload_identity_example(render: Render) -> None:
    objects = render(ci_file("onelake-workload-identity-values.yaml"))
    sa = one(objects, "ServiceAccount")
    assert sa["metadata"]["annotations"] == {
        "azure.workload.identity/client-id": "2f0d3c4b-5a6e-4f70-8a9b-0c1d2e3f4a5b",
        "azure.workload.identity/tenant-id": "72f988bf-86f1-41af-91ab-2d7cd011db47",
    }
    assert sa["automountServiceAccountToken"] is False  # local Spark needs no API token


def test_event_hubs_through_kafka_s_own_workload_identity(render: Render) -> None:
    """Kafka's Entra identity a workload identity, OneLake's a service principal: label, annotation, no password."""
    objects = render(ci_file("event-hubs-entra-values.yaml"))
    source = connector_config(objects)["source"]
    client_id = "5b7c9d1e-2f3a-4b5c-8d6e-7f8091a2b3c4"
    assert source["kafka_auth"] == {
        "kind": "entra",
        "credential": {"kind": "workload_identity", "client_id": client_id},
    }
    assert source["kafka_options"] == {"security.protocol": "SASL_SSL"}
    sa = one(objects, "ServiceAccount")
    assert sa["metadata"]["annotations"]["azure.workload.identity/client-id"] == client_id
    template = executor_template(objects)
    assert template is not None
    for labels in (
        one(objects, "StatefulSet")["spec"]["template"]["metadata"]["labels"],
        template["metadata"]["labels"],
    ):
        assert labels["azure.workload.identity/use"] == "true"
    for spec in pod_specs(objects):
        names = {e["name"] for c in spec["containers"] for e in c.get("env", [])}
        assert not names & {"KAFKA_SASL_PASSWORD", "KAFKA_SASL_JAAS_CONFIG"}


def test_event_hubs_with_the_onelake_identity(render: Render) -> None:
    objects = render(
        ci_file("onelake-workload-identity-values.yaml"),
        set_values=(
            "kafka.security.protocol=SASL_SSL",
            "kafka.security.entra.enabled=true",
            "kafka.security.entra.scope=https://erp.servicebus.windows.net/.default",
        ),
    )
    auth = connector_config(objects)["source"]["kafka_auth"]
    assert auth == {
        "kind": "entra",
        "credential": "workload_identity",
        "scope": "https://erp.servicebus.windows.net/.default",
    }


def test_sasl_password_comes_from_the_secret(render: Render) -> None:
    objects = render(ci_file("sasl-kafka-values.yaml"))
    env = one(objects, "StatefulSet")["spec"]["template"]["spec"]["containers"][0]["env"]
    names = [e["name"] for e in env]
    # $(KAFKA_SASL_PASSWORD) expands only if the variable is defined earlier in the list.
    assert names.index("KAFKA_SASL_PASSWORD") < names.index("KAFKA_SASL_JAAS_CONFIG")
    password = env[names.index("KAFKA_SASL_PASSWORD")]["valueFrom"]["secretKeyRef"]
    assert password == {"name": "fabric-mirror-kafka-user", "key": "password"}
    jaas = env[names.index("KAFKA_SASL_JAAS_CONFIG")]["value"]
    assert jaas == (
        "org.apache.kafka.common.security.scram.ScramLoginModule required "
        'username="fabric-mirror" password="$(KAFKA_SASL_PASSWORD)";'
    )
    options = connector_config(objects)["source"]["kafka_options"]
    assert options["security.protocol"] == "SASL_SSL"
    assert options["sasl.mechanism"] == "SCRAM-SHA-512"
    assert options["sasl.jaas.config"] == "${env:KAFKA_SASL_JAAS_CONFIG}"
    assert options["ssl.truststore.type"] == "PEM"
    assert options["ssl.truststore.location"] == "/etc/connector/secrets/kafka-ca/ca.crt"
    assert options["fetch.max.bytes"] == "104857600"


def test_local_mode_has_no_kubernetes_api_access(render: Render) -> None:
    objects = render(ci_file("minimal-values.yaml"))
    assert not by_kind(objects, "Role") and not by_kind(objects, "RoleBinding")
    assert one(objects, "StatefulSet")["spec"]["template"]["spec"]["automountServiceAccountToken"] is False
    spark = connector_config(objects)["spark"]
    assert spark["master"] == "local[*]"
    assert not any(k.startswith("spark.kubernetes.") for k in spark["conf"])
    assert executor_template(objects) is None


def test_k8s_spark_mode(render: Render) -> None:
    objects = render(ci_file("k8s-spark-values.yaml"))
    sts = one(objects, "StatefulSet")
    sa_name = one(objects, "ServiceAccount")["metadata"]["name"]
    spark = connector_config(objects)["spark"]
    conf = spark["conf"]
    assert spark["master"] == "k8s://https://kubernetes.default.svc"

    role = one(objects, "Role")
    rules = role["rules"]
    granted = {(r, v) for rule in rules for r in rule["resources"] for v in rule["verbs"]}
    for resource in ("pods", "services", "configmaps", "persistentvolumeclaims"):
        for verb in ("create", "get", "list", "watch", "delete"):
            assert (resource, verb) in granted
    binding = one(objects, "RoleBinding")
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": sa_name, "namespace": "cdc"}]
    assert sts["spec"]["template"]["spec"]["automountServiceAccountToken"] is True

    headless = next(s for s in by_kind(objects, "Service") if s["spec"].get("clusterIP") == "None")
    assert headless["spec"]["publishNotReadyAddresses"] is True
    assert sts["spec"]["serviceName"] == headless["metadata"]["name"]
    assert conf["spark.driver.host"] == f"{headless['metadata']['name']}.cdc.svc"
    ports = {p["name"]: p["port"] for p in headless["spec"]["ports"]}
    assert str(ports["spark-driver"]) == conf["spark.driver.port"]
    assert str(ports["spark-blockmgr"]) == conf["spark.driver.blockManager.port"]
    container_ports = {p["name"] for p in sts["spec"]["template"]["spec"]["containers"][0]["ports"]}
    assert {"spark-driver", "spark-blockmgr"} <= container_ports

    assert conf["spark.kubernetes.namespace"] == "cdc"
    assert conf["spark.kubernetes.driver.pod.name"] == sts["metadata"]["name"] + "-0"
    assert conf["spark.kubernetes.container.image"] == sts["spec"]["template"]["spec"]["containers"][0]["image"]
    assert conf["spark.kubernetes.container.image.pullSecrets"] == "acr-pull"
    assert conf["spark.kubernetes.authenticate.executor.serviceAccountName"] == sa_name
    assert conf["spark.kubernetes.executor.podTemplateFile"] == "/etc/connector/config/executor-pod-template.yaml"
    assert conf["spark.executor.instances"] == "4"
    assert re.fullmatch(r"[a-z0-9]([-a-z0-9]{0,45}[a-z0-9])?", conf["spark.kubernetes.executor.podNamePrefix"])
    assert conf["spark.sql.shuffle.partitions"] == "16"  # user conf is passed through as a string

    template = executor_template(objects)
    assert template is not None
    container = template["spec"]["containers"][0]
    assert container["name"] == conf["spark.kubernetes.executor.podTemplateContainerName"]
    assert template["spec"]["nodeSelector"] == {"agentpool": "spark"}
    jaas = next(e for e in container["env"] if e["name"] == "KAFKA_SASL_JAAS_CONFIG")
    assert jaas["valueFrom"]["secretKeyRef"] == {"name": "bigdb-kafka-jaas", "key": "sasl.jaas.config"}


def test_k8s_executors_work_in_a_writable_directory_with_the_drivers_identity(render: Render) -> None:
    objects = render(ci_file("k8s-spark-values.yaml"))
    driver = one(objects, "StatefulSet")["spec"]["template"]["spec"]
    template = executor_template(objects)
    assert template is not None
    spec = template["spec"]
    container = spec["containers"][0]
    # Spark copies spark.jars into the executor's working directory: it must be a writable volume while the
    # root filesystem stays read-only.
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    work = mounts[container["workingDir"]]
    volume = next(v for v in spec["volumes"] if v["name"] == work["name"])
    assert "emptyDir" in volume and not work.get("readOnly", False)
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"] == driver["containers"][0]["securityContext"]
    assert spec["securityContext"] == driver["securityContext"]
    # Executors write staged files with the landing-zone identity: the same service account (workload
    # identity) and the same secret references as the driver; no API token.
    assert spec["serviceAccountName"] == driver["serviceAccountName"]
    assert template["metadata"]["labels"]["azure.workload.identity/use"] == "true"
    assert spec["automountServiceAccountToken"] is False
    driver_env = {e["name"]: e for e in driver["containers"][0]["env"]}
    for var in container["env"]:
        assert driver_env[var["name"]] == var
    assert connector_config(objects)["spark"]["decode_on"] == "executors"


def _gib(quantity: str) -> float:
    units = {"g": 1.0, "m": 1 / 1024, "Gi": 1.0, "Mi": 1 / 1024}
    number = re.fullmatch(r"(\d+)([a-zA-Z]*)", quantity)
    assert number, quantity
    return int(number[1]) * units[number[2]]


# Peak RSS of one task's Python worker per record, 2 KB events (chart README "Sizing", benchmarks/slice_memory.py).
WORKER_BYTES_PER_RECORD_2KB = 948 * 2**20 / 62_500


def test_k8s_example_fits_its_pods(render: Render) -> None:
    objects = render(ci_file("k8s-spark-values.yaml"))
    config = connector_config(objects)
    conf = config["spark"]["conf"]
    limit = _gib(
        one(objects, "StatefulSet")["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["memory"]
    )
    # The driver's heap leaves room for its Python and the JVM's native memory; task results are metadata.
    assert _gib(conf["spark.driver.memory"]) <= limit / 2
    assert _gib(conf["spark.driver.maxResultSize"]) <= _gib(conf["spark.driver.memory"]) / 4
    # Each executor core runs one task of at most max_records_per_partition records in its Python worker,
    # which lives in the overhead (Spark's pod limit is heap + overhead).
    records = config["source"]["max_records_per_partition"]
    cores = int(conf["spark.executor.cores"])
    assert cores * records * WORKER_BYTES_PER_RECORD_2KB <= _gib(conf["spark.executor.memoryOverhead"]) * 2**30
    assert config["source"]["max_offsets_per_trigger"] >= records
    assert "max_records_per_partition" not in connector_config(render(ci_file("minimal-values.yaml")))["source"]


def test_k8s_spark_authentication_and_encryption(render: Render) -> None:
    objects = render(ci_file("k8s-spark-values.yaml"))
    conf = connector_config(objects)["spark"]["conf"]
    assert conf["spark.authenticate"] == "true"
    assert conf["spark.network.crypto.enabled"] == "true"
    assert conf["spark.io.encryption.enabled"] == "true"
    assert "spark.authenticate.secret" not in conf, "the key itself must never be in the config"
    key_file = conf["spark.authenticate.secret.driver.file"]
    assert conf["spark.authenticate.secret.executor.file"] == key_file
    template = executor_template(objects)
    assert template is not None
    sts = one(objects, "StatefulSet")
    # The key file is the values' Secret, mounted read-only at that path in the driver and in every executor.
    for spec in (sts["spec"]["template"]["spec"], template["spec"]):
        container = spec["containers"][0]
        mount = next(m for m in container["volumeMounts"] if key_file.startswith(m["mountPath"] + "/"))
        assert mount["readOnly"] is True
        volume = next(v for v in spec["volumes"] if v["name"] == mount["name"])
        assert volume["secret"]["secretName"] == "bigdb-spark-auth"
        assert volume["secret"]["items"] == [{"key": "secret", "path": key_file.rsplit("/", 1)[1]}]
        assert not any(e["name"] == "SPARK_AUTH_SECRET" for e in container.get("env", []))
    assert "spark.authenticate" not in connector_config(render(ci_file("minimal-values.yaml")))["spark"]["conf"]


def _policy(objects: list[dict[str, Any]], suffix: str) -> dict[str, Any]:
    return next(p for p in by_kind(objects, "NetworkPolicy") if p["metadata"]["name"].endswith(suffix))


def _selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    return bool(selector["matchLabels"].items() <= labels.items())


def test_network_policies_admit_only_the_release_executors_and_the_scraper(render: Render) -> None:
    objects = render(ci_file("k8s-spark-values.yaml"))
    sts = one(objects, "StatefulSet")
    driver_labels = sts["spec"]["template"]["metadata"]["labels"]
    template = executor_template(objects)
    assert template is not None
    executor_labels = template["metadata"]["labels"]
    conf = connector_config(objects)["spark"]["conf"]
    spark_ports = {int(conf["spark.driver.port"]), int(conf["spark.driver.blockManager.port"])}
    metrics_port = next(p["containerPort"] for p in sts["spec"]["template"]["spec"]["containers"][0]["ports"])

    driver = _policy(objects, "-driver")
    assert _selects(driver["spec"]["podSelector"], driver_labels)
    assert not _selects(driver["spec"]["podSelector"], executor_labels)
    assert driver["spec"]["policyTypes"] == ["Ingress"]
    rules = driver["spec"]["ingress"]
    assert len(rules) == 2
    for rule in rules:
        ports = {p["port"] for p in rule["ports"]}
        if ports == {metrics_port}:
            assert rule["from"] == [
                {"namespaceSelector": {}, "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}}}
            ]
        else:
            assert ports == spark_ports
            (peer,) = rule["from"]
            assert set(peer) == {"podSelector"}, "executors of this namespace only"
            assert _selects(peer["podSelector"], executor_labels)
            assert not _selects(peer["podSelector"], driver_labels)
            other_release = dict(executor_labels, **{"app.kubernetes.io/instance": "other"})
            assert not _selects(peer["podSelector"], other_release)

    executors = _policy(objects, "-executors")
    assert _selects(executors["spec"]["podSelector"], executor_labels)
    (rule,) = executors["spec"]["ingress"]
    assert "ports" not in rule  # block managers listen on random ports
    assert {_selects(p["podSelector"], driver_labels) for p in rule["from"]} == {True, False}
    assert all(set(p) == {"podSelector"} for p in rule["from"])

    # Services select the connector pod only: executor pods carry the release's selector labels too.
    for service in by_kind(objects, "Service"):
        assert _selects({"matchLabels": service["spec"]["selector"]}, driver_labels)
        assert not _selects({"matchLabels": service["spec"]["selector"]}, executor_labels)

    local = render(ci_file("minimal-values.yaml"))
    (policy,) = by_kind(local, "NetworkPolicy")
    assert [{p["port"] for p in r["ports"]} for r in policy["spec"]["ingress"]] == [{metrics_port}]
    assert not by_kind(
        render(ci_file("minimal-values.yaml"), set_values=("networkPolicy.enabled=false",)), "NetworkPolicy"
    )


def test_fabric_status_wiring(render: Render) -> None:
    assert "fabric_status" not in connector_config(render(ci_file("minimal-values.yaml")))
    objects = render(ci_file("fabric-status-values.yaml"))
    fabric = connector_config(objects)["fabric_status"]
    assert fabric == {
        "kind": "rest",
        "workspace_id": "8f3c2a51-0b7e-4f55-9d2a-1c8e6f0b9a01",
        "mirrored_database_id": "4d1e7b62-93a0-4c5e-8f21-7a9b0c3d2e14",
        "api_url": "https://api.fabric.microsoft.com",
        "credential": "default",
        "bearer_token": "${env:FABRIC_STATUS_BEARER_TOKEN}",
        "poll_s": 30,
    }
    container = one(objects, "StatefulSet")["spec"]["template"]["spec"]["containers"][0]
    token = next(e for e in container["env"] if e["name"] == "FABRIC_STATUS_BEARER_TOKEN")
    assert token["valueFrom"]["secretKeyRef"] == {"name": "fabric-status-token", "key": "token"}
    monitoring = connector_config(
        render(
            ci_file("minimal-values.yaml"), set_values=("fabricStatus.kind=monitoring", "fabricStatus.pollSeconds=120")
        )
    )["fabric_status"]
    assert monitoring == {"kind": "monitoring", "credential": "default", "poll_s": 120}


def test_debezium_settings_check_wiring(render: Render) -> None:
    """``debezium.connectUrl`` makes the connector check the Debezium connectors' settings at start and watch them."""
    assert "debezium_connect_url" not in connector_config(render(ci_file("minimal-values.yaml")))["source"]
    source = connector_config(
        render(
            ci_file("minimal-values.yaml"),
            set_values=("debezium.connectUrl=http://connect.kafka:8083", "debezium.connectors[0]=inventory"),
        )
    )["source"]
    assert source["debezium_connect_url"] == "http://connect.kafka:8083"
    assert source["debezium_connectors"] == ["inventory"]
    assert source["debezium_status_poll_s"] == 30  # the connectors' status is watched by default
    never = connector_config(
        render(
            ci_file("minimal-values.yaml"),
            set_values=("debezium.connectUrl=http://connect.kafka:8083", "debezium.statusPollSeconds=0"),
        )
    )["source"]
    assert never["debezium_status_poll_s"] == 0


def test_kafka_mutual_tls_files_are_mounted(render: Render) -> None:
    objects = render(ci_file("service-principal-secret-values.yaml"))
    options = connector_config(objects)["source"]["kafka_options"]
    assert options["security.protocol"] == "SSL"
    mounts = {
        m["mountPath"] for m in one(objects, "StatefulSet")["spec"]["template"]["spec"]["containers"][0]["volumeMounts"]
    }
    for key in ("ssl.truststore.location", "ssl.keystore.location"):
        assert options[key].rsplit("/", 1)[0] in mounts


def test_monitoring_objects(render: Render) -> None:
    objects = render(ci_file("onelake-workload-identity-values.yaml"))
    monitor = one(objects, "ServiceMonitor")
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    selector = monitor["spec"]["selector"]["matchLabels"]
    selected = [s for s in by_kind(objects, "Service") if selector.items() <= s["metadata"]["labels"].items()]
    assert len(selected) == 1, "the ServiceMonitor must select only the metrics Service (no double scrape)"
    assert monitor["spec"]["endpoints"][0]["port"] in {p["name"] for p in selected[0]["spec"]["ports"]}
    # The job label is the chart name, the job the alert rules select on.
    assert selected[0]["metadata"]["labels"][monitor["spec"]["jobLabel"]] == "debezium-fabric-mirror"

    rule = one(objects, "PrometheusRule")
    assert rule["spec"] == yaml.safe_load((PROMETHEUS_DIR / "rules.yml").read_text())

    minimal = render(ci_file("minimal-values.yaml"))
    assert not by_kind(minimal, "ServiceMonitor") and not by_kind(minimal, "PrometheusRule")


def test_config_change_rolls_the_pod(render: Render) -> None:
    def checksum(*set_values: str) -> str:
        sts = one(render(ci_file("minimal-values.yaml"), set_values=set_values), "StatefulSet")
        value: str = sts["spec"]["template"]["metadata"]["annotations"]["checksum/config"]
        return value

    assert checksum() != checksum("trigger=30s")


GUID = "8f3c2a51-0b7e-4f55-9d2a-1c8e6f0b9a01"
BAD_VALUES = {
    "replicas": (["replicas=2"], "replicas"),
    "trigger not a string": (["trigger=10"], "trigger"),
    "trigger available-now": (["trigger=available-now"], "trigger"),
    "secret value instead of a reference": (["kafka.security.sasl.password=hunter2"], "password"),
    "SASL without credentials": (["kafka.security.protocol=SASL_SSL"], "sasl"),
    "workload identity without client id": (["identity.type=workloadIdentity"], "clientId"),
    "service principal without secret": (["identity.type=servicePrincipalSecret"], "existingSecret"),
    "unknown identity": (["identity.type=password"], "type"),
    "checkpoint url (run refuses a remote checkpoint)": (["checkpoint.url=abfss://c@a.dfs.core.windows.net/x"], "url"),
    "checkpoint type (only a PVC)": (["checkpoint.type=pvc"], "type"),
    "k8s mode without the Spark auth secret": (["spark.mode=k8s"], "authSecret"),
    "decodeOn": (["spark.decodeOn=workers"], "decodeOn"),
    "landing zone not a URL": (["landingZone.url=/data/landing"], "url"),
    "root": (["podSecurityContext.runAsNonRoot=false"], "runAsNonRoot"),
    "spark mode": (["spark.mode=yarn"], "mode"),
    "k8s mode without API token": (["spark.mode=k8s", "serviceAccount.automountToken=false"], "automountToken"),
    "plain secret in extraEnv": (["extraEnv[0].name=DB_PASSWORD", "extraEnv[0].value=hunter2"], "extraEnv"),
    "plain jaas in kafka options": (["kafka.options.sasl\\.jaas\\.config=x"], "sasl.jaas.config"),
    "typo in a key": (["kafka.bootstrapServer=kafka:9092"], "bootstrapServer"),
    "fabric rest without ids": (["fabricStatus.kind=rest"], "workspaceId"),
    "fabric api over plain http": (["fabricStatus.apiUrl=http://fabric.example.com"], "apiUrl"),
    "kafka connect url not http": (["debezium.connectUrl=connect:8083"], "connectUrl"),
    "init create mode with a landing zone given (it is derived from the created item)": (
        ["init.enabled=true", "init.name=m", "fabricStatus.kind=rest", f"fabricStatus.workspaceId={GUID}"],
        "landingZone",
    ),
    "init create mode without the workspace": (
        ["init.enabled=true", "init.name=m", "landingZone.url=", "fabricStatus.kind=rest"],
        "workspaceId",
    ),
    "init name with init off": (["init.name=m", "landingZone.url="], "enabled"),
}


@pytest.mark.parametrize("set_values,fragment", BAD_VALUES.values(), ids=BAD_VALUES.keys())
def test_bad_values_rejected_by_schema(helm: str, set_values: list[str], fragment: str) -> None:
    args = [helm, "template", "mirror", str(CHART), "-f", str(ci_file("minimal-values.yaml"))]
    for s in set_values:
        args += ["--set", s]
    result = run(args)
    assert result.returncode != 0, f"accepted: {set_values}"
    assert "values don't meet the specifications of the schema" in result.stderr, result.stderr
    assert fragment in result.stderr, result.stderr


def test_required_values_are_reported(helm: str) -> None:
    result = run([helm, "template", "mirror", str(CHART)])
    assert result.returncode != 0
    for path in ("bootstrapServers", "topics", "landingZone"):
        assert path in result.stderr, result.stderr


@ci
def test_rendered_config_passes_check_config(render: Render, values: Path, tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(one(render(values), "ConfigMap")["data"]["config.yaml"])
    result = run([sys.executable, "-m", "connector", "check-config", str(config)], cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


def test_init_create_mode_hands_run_the_config_it_writes(render: Render) -> None:
    """init.name: the init container finds or creates the database and writes run's config into an emptyDir."""
    objects = render(ci_file("init-create-values.yaml"))
    spec = one(objects, "StatefulSet")["spec"]["template"]["spec"]
    (init,) = spec["initContainers"]
    args = init["args"]
    assert args[args.index("--name") + 1] == "Sales mirror"
    assert args[args.index("--write-config") + 1] == INIT_CONFIG_PATH
    assert args[args.index("--config") + 1] == CONFIG_PATH
    assert "--delta-change-data-feed" in args
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert "emptyDir" in volumes["init-config"]
    written = next(m for m in init["volumeMounts"] if m["name"] == "init-config")
    read = next(m for m in spec["containers"][0]["volumeMounts"] if m["name"] == "init-config")
    assert INIT_CONFIG_PATH == written["mountPath"] + "/config.yaml" == read["mountPath"] + "/config.yaml"
    assert read["readOnly"] is True and not written.get("readOnly", False)
    config = connector_config(objects)
    assert "url" not in config["landing_zone"]  # derived from the created item by init
    assert "mirrored_database_id" not in config["fabric_status"]
