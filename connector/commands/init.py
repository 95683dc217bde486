"""``init`` (the open-mirrored database made to exist and run) and ``check-config --online`` (the chain checked).

``init`` prints the settings ``run`` and ``fabric_status`` need (or writes them into the YAML config with
``--write-config``), then the same checks as ``check-config --online`` for Kafka and Debezium when the config
names them. Every failure is one line ``<step>: <problem>; <fix>`` (``ChainStepFailed``), exit non-zero;
progress lines (waits for Fabric's long-running operations and throttling) go to stderr.
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import orjson
import yaml

from connector.config import ConnectorSettings
from connector.errors import ConfigError, ConnectorError
from connector.fabric.database_init import (
    CHANGE_DATA_FEED,
    ONELAKE_URL,
    STEP_MIRRORING,
    ChainStepFailed,
    InitRequest,
    MirrorTarget,
    change_data_feed,
    explain,
    fabric_api_for,
    init_mirror,
    open_landing_zone,
    probe_landing_zone,
)
from connector.fabric.rest_api import FabricApi, FabricApiError

STEP_KAFKA = "kafka"
STEP_DEBEZIUM = "debezium"
STEP_LOCAL_LANDING = "landing-zone"


def _progress(line: str) -> None:
    print(f"init: {line}", file=sys.stderr, flush=True)


def init_command(settings: ConnectorSettings, options: Mapping[str, Any]) -> int:
    """Make the mirrored database exist and run, then check Kafka and Debezium when configured.

    ``options``: ``name``, ``onelake_url``, ``default_schema``, ``target_properties``, ``start``, ``max_wait_s``,
    ``delta_change_data_feed``, ``write_config`` (the CLI's flags) and ``config`` (the ``--config`` file, which a
    ``--write-config`` file that does not exist yet starts as a copy of).

    Raises:
        ChainStepFailed: The first step that failed (the CLI prints it as one ``error:`` line, exit 2).
    """
    config = settings.fabric_status
    if not config.workspace_id:
        msg = "init needs the workspace: --workspace-id (or fabric_status.workspace_id)"
        raise ConfigError(msg)
    request = InitRequest(
        workspace_id=config.workspace_id,
        name=options.get("name"),
        item_id=config.mirrored_database_id,
        onelake_url=str(options.get("onelake_url") or ONELAKE_URL),
        default_schema=str(options.get("default_schema") or "dbo"),
        target_properties=options.get("target_properties") or {},
        start=bool(options.get("start")),
        delta_change_data_feed=bool(options.get("delta_change_data_feed")),
        credential=settings.landing_zone.identity,
        partner_name=settings.mirror.partner_name,
        source_type=settings.mirror.source_type or "Debezium",
        source_version=settings.mirror.source_version,
    )
    with fabric_api_for(settings, max_wait_s=float(options.get("max_wait_s") or 600), progress=_progress) as api:
        target = init_mirror(api, request, progress=_progress)
    _print_target(target)
    failures = source_failures(settings)
    if failures:
        raise failures[0]
    if options.get("write_config"):
        source = Path(str(options["config"])) if options.get("config") else None
        write_config(Path(str(options["write_config"])), target, settings.fabric_status.api_url, source)
        print(f"written into {options['write_config']}")
    return 0


def _print_target(target: MirrorTarget) -> None:
    changes = (
        ("created", target.created),
        ("started", target.started),
        ("Delta change data feed enabled", target.definition_updated),
    )
    change = [word for word, done in changes if done]
    print(
        f"mirrored database {target.name!r} ({target.item_id}) in workspace {target.workspace_id}: {target.state}"
        f" ({', '.join(change) or 'already there, nothing changed'})"
    )
    print(f"landing_zone.url: {target.landing_zone_url}")
    print("fabric_status.kind: rest")
    print(f"fabric_status.workspace_id: {target.workspace_id}")
    print(f"fabric_status.mirrored_database_id: {target.item_id}")


def write_config(path: Path, target: MirrorTarget, api_url: str, source: Path | None = None) -> None:
    """Set the landing zone and ``fabric_status`` of the YAML config at ``path`` (created when missing).

    Other keys are kept (comments are not: YAML is rewritten); the file is replaced in one rename. A missing
    ``path`` starts as ``source`` (``--config``), so a chart's init container can hand ``run`` a whole config.
    """
    data: dict[str, Any] = {}
    origin = path if path.exists() else source
    if origin is not None and origin.exists():
        loaded = yaml.safe_load(origin.read_text())
        if loaded is not None and not isinstance(loaded, dict):
            msg = f"--write-config {origin}: not a YAML mapping"
            raise ConfigError(msg)
        data = loaded or {}
    data.setdefault("landing_zone", {})["url"] = target.landing_zone_url
    status = data.setdefault("fabric_status", {})
    status.update({"kind": "rest", "workspace_id": target.workspace_id, "mirrored_database_id": target.item_id})
    if api_url != "https://api.fabric.microsoft.com":
        status["api_url"] = api_url
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(handle, "w") as out:
        yaml.safe_dump(data, out, sort_keys=False)
    os.replace(temporary, path)


def check_online(settings: ConnectorSettings, report: Callable[[str], None] = print) -> list[ChainStepFailed]:
    """Every step of the chain, each reported ``ok <step>: …`` or returned as a failure (none raised)."""
    failures: list[ChainStepFailed] = []
    for step in (_check_fabric, _check_landing_zone):
        try:
            report(f"ok {step(settings)}")
        except ChainStepFailed as failure:
            failures.append(failure)
    failures.extend(source_failures(settings, report))
    return failures


def source_failures(settings: ConnectorSettings, report: Callable[[str], None] = print) -> list[ChainStepFailed]:
    """Kafka reachable with the source's settings and its topics matched; Debezium's settings checked."""
    from connector.operate.debezium_config_lint import lint_debezium_connectors
    from connector.stream.preflight import check_kafka

    failures: list[ChainStepFailed] = []
    source = settings.source
    if source.kind == "kafka":
        try:
            topics = check_kafka(source, settings.trigger)
            shown = "pattern not checked here" if topics is None else f"{len(topics)} topics match"
            report(f"ok {STEP_KAFKA}: {source.bootstrap_servers} answers, {shown}")
        except ConfigError as exc:
            fix = "check source.bootstrap_servers and source.kafka_options"
            failures.append(ChainStepFailed(STEP_KAFKA, str(exc), fix))
    if source.debezium_connect_url:
        try:
            _, findings = lint_debezium_connectors(
                source.debezium_connect_url,
                source.debezium_connectors,
                settings.mirror.truncate_policy,
                rebuilds=settings.mirror.asks_for_snapshots,
            )
        except ConnectorError as exc:
            failures.append(ChainStepFailed(STEP_DEBEZIUM, str(exc), "check source.debezium_connect_url"))
        else:
            fix = "change the connector's setting (see README, Debezium settings)"
            failures.extend(
                ChainStepFailed(STEP_DEBEZIUM, f"{f.connector}: {f.setting}={f.value}: {f.consequence}", fix)
                for f in findings
            )
            if not findings:
                report(f"ok {STEP_DEBEZIUM}: the connectors' settings fit an exact mirror")
    return failures


def _check_fabric(settings: ConnectorSettings) -> str:
    config = settings.fabric_status
    if config.kind != "rest":
        return f"fabric: fabric_status.kind {config.kind}: the database's status is not read, not checked"
    if not config.workspace_id or not config.mirrored_database_id:
        msg = "fabric_status.workspace_id and fabric_status.mirrored_database_id are required for kind rest"
        raise ChainStepFailed(STEP_MIRRORING, msg, "run python -m connector init --write-config FILE")
    workspace, item = config.workspace_id, config.mirrored_database_id
    with fabric_api_for(settings, max_wait_s=60, progress=_progress) as api:
        try:
            name = api.get_mirrored_database(workspace, item).get("displayName", item)
            state, error = api.mirroring_status(workspace, item)
        except FabricApiError as exc:
            raise explain(STEP_MIRRORING, exc, workspace, item) from None
        if state.lower() != "running" or error is not None:
            detail = f" ({error})" if error else ""
            problem = f"mirrored database {name!r} ({item}) is {state}{detail}: mirroring would not read the files"
            raise ChainStepFailed(STEP_MIRRORING, problem, "start it: python -m connector init --start, or the portal")
        cdf = _change_data_feed_line(api, workspace, item)
    return f"{STEP_MIRRORING}: mirrored database {name!r} ({item}) is Running; {cdf}"


def _change_data_feed_line(api: FabricApi, workspace: str, item: str) -> str:
    """The Delta change data feed setting of the definition, as ``check-config --online`` reports it."""
    try:
        enabled = change_data_feed(api, workspace, item)
    except FabricApiError as exc:
        return f"Delta change data feed not read ({exc})"
    if enabled is None:
        return "Delta change data feed unknown (no readable mirroring.json)"
    return f"Delta change data feed {'on' if enabled else 'off'} ({CHANGE_DATA_FEED})"


def _check_landing_zone(settings: ConnectorSettings) -> str:
    from connector.stream.preflight import check_local_folder

    url = settings.landing_zone.url
    try:
        location = settings.landing_zone.location  # an empty, SAS-carrying or malformed URL is refused here
        if not location.remote:
            check_local_folder(url, "landing_zone.url")
            return f"{STEP_LOCAL_LANDING}: {url} is a writable local folder"
    except ConfigError as exc:
        raise ChainStepFailed(STEP_LOCAL_LANDING, str(exc), "fix landing_zone.url") from None
    with open_landing_zone(location) as storage:
        probe_landing_zone(storage, url)
    return f"{STEP_LOCAL_LANDING}: {url}: create, append, flush, rename and delete of a scratch file succeeded"


def parse_target_properties(pairs: list[str] | None) -> dict[str, Any]:
    """``KEY=VALUE`` flags as ``target.typeProperties``; a VALUE that is JSON (``true``, ``7``) is read as JSON.

    Raises:
        ConfigError: A pair without ``=``.
    """
    out: dict[str, Any] = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            msg = f"--target-property {pair!r}: write KEY=VALUE"
            raise ConfigError(msg)
        try:
            out[key] = orjson.loads(value)
        except orjson.JSONDecodeError:
            out[key] = value
    return out
