"""From nothing to a running mirror: the open-mirrored database made to exist and run, and the chain checked.

Before the connector writes one file, a first mirror needs an open-mirrored database, started, whose landing
zone the connector's identity may write, plus the ids ``run`` and ``fabric_status`` need. Done by hand in the
portal, the first sign of a mistake used to be an error from a running service, or files piling up unread in
a stopped database. ``init_mirror`` does every step through the Fabric REST API (``connector.fabric.rest_api``)
and OneLake, idempotently: an item found by id or display name is reused, a running database is left alone,
``_partnerEvents.json`` is kept when present, so a second run changes nothing.

A database still ``Initializing`` (as one just created is) is waited for before ``startMirroring``: Microsoft's
mirroring REST how-to (learn.microsoft.com/fabric/mirroring/mirrored-database-rest-api) says mirroring cannot be
started while Get Mirroring Status says ``Initializing``; every wait is one progress line, bounded by ``--max-wait``.

``delta_change_data_feed`` sets ``enableDeltaChangeDataFeed`` in ``target.typeProperties`` of ``mirroring.json``
(learn.microsoft.com/fabric/mirroring/extended-capabilities-delta-change-data-feed): in the definition of a
database created now, and for one that exists through getDefinition / updateDefinition, nothing sent when it is
already set.

A database found Stopped or Paused is not started unless asked (``start=True``, ``init --start``): someone
stopped it, and only they know why. One created now (or never started, ``Initialized``) is started.

``check_chain`` is the preflight of the whole chain (``check-config --online``; ``init`` runs the same steps):
Fabric API token and the database (exists, running), OneLake token and a scratch file created, appended,
flushed, renamed and deleted in the landing zone, Kafka reachable and the topics matched, Debezium's settings.
Each failure is one ``ChainStepFailed`` line naming the step, what is wrong and the fix; no secret in it.
"""

from __future__ import annotations

import base64
import binascii
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson

from connector.errors import ConfigError, ConnectorError, exception_line
from connector.fabric.rest_api import FabricApi, FabricApiError
from connector.fabric.status_rest import identity_token, static_token
from connector.storage.errors import StorageAccessDenied, StorageError, StorageNotFound
from connector.storage.identity import CredentialConfig
from connector.storage.location import StorageLocation

if TYPE_CHECKING:
    from connector.config import ConnectorSettings
    from connector.storage import Storage

#: OneLake's DFS endpoint; a landing zone is ``{endpoint}/{workspaceId}/{itemId}/Files/LandingZone``.
ONELAKE_URL = "https://onelake.dfs.fabric.microsoft.com"
#: States a database passes through on its way to Running after a start.
_STARTING = frozenset({"initializing", "initialized", "starting"})
#: A starting database is looked at after 1 s, then twice as late each time, at most this far apart.
START_POLL_MAX_S = 15.0
#: The steps, as failure lines name them.
STEP_API_TOKEN = "fabric-api-token"  # noqa: S105 - a step name, not a secret
STEP_DATABASE = "mirrored-database"
STEP_MIRRORING = "mirroring"
STEP_DEFINITION = "mirroring-definition"
#: ``target.typeProperties`` key of the Delta change data feed (mirrored database definition).
CHANGE_DATA_FEED = "enableDeltaChangeDataFeed"
#: States ``startMirroring`` is not sent in: wait until they pass.
_NOT_STARTABLE_YET = frozenset({"initializing"})
STEP_LANDING_TOKEN = "landing-zone-token"  # noqa: S105 - a step name
STEP_LANDING = "landing-zone"
STEP_PARTNER_EVENTS = "partner-events"


class ChainStepFailed(ConnectorError):
    """One step of the chain failed: ``<step>: <what is wrong>; <how to fix it>``."""

    def __init__(self, step: str, problem: str, fix: str) -> None:
        super().__init__(step, problem, fix)
        self.step = step
        self.problem = problem
        self.fix = fix

    def __str__(self) -> str:
        return f"{self.step}: {self.problem}; {self.fix}"


@dataclass(frozen=True)
class InitRequest:
    """What ``init`` is asked to make exist.

    Attributes:
        workspace_id: The Fabric workspace (GUID).
        name: Display name of the mirrored database: found, or created when missing.
        item_id: An existing mirrored database's id (instead of, or as well as, ``name``).
        onelake_url: OneLake's DFS endpoint (``ONELAKE_URL``; a test double's URL in tests).
        default_schema: ``defaultSchema`` of a created database (tables published without a schema land there).
        target_properties: Extra ``target.typeProperties`` of ``mirroring.json`` (e.g. the Delta change data feed
            setting Microsoft documents for the definition), merged over ``format: Delta``, ``defaultSchema``.
        start: Start a database found Stopped or Paused.
        delta_change_data_feed: ``enableDeltaChangeDataFeed`` set in the definition (created or existing database).
        credential: The identity that writes the landing zone (``landing_zone.credential``).
        partner_name, source_type, source_version: ``_partnerEvents.json``'s content, as ``run`` would write it.
    """

    workspace_id: str
    name: str | None
    item_id: str | None
    onelake_url: str = ONELAKE_URL
    default_schema: str = "dbo"
    target_properties: Mapping[str, Any] | None = None
    start: bool = False
    delta_change_data_feed: bool = False
    credential: CredentialConfig = CredentialConfig()
    partner_name: str = "debezium-fabric-mirror"
    source_type: str = "Debezium"
    source_version: str | None = None


@dataclass(frozen=True)
class MirrorTarget:
    """What ``init`` found or made: the ids and URL ``run`` and ``fabric_status`` need, and what changed."""

    workspace_id: str
    item_id: str
    name: str
    landing_zone_url: str
    state: str
    created: bool
    started: bool
    definition_updated: bool = False


def mirroring_definition(default_schema: str, target_properties: Mapping[str, Any] | None) -> dict[str, Any]:
    """``mirroring.json`` of an open-mirrored database (source ``GenericMirror``, target Delta).

    From Microsoft's "Mirrored database definition" article (rest/api/fabric/articles/item-management/
    definitions/mirrored-database-definition): ``source.type`` ``GenericMirror`` needs no connection;
    ``target.type`` is ``MountedRelationalDatabase`` with ``typeProperties`` ``defaultSchema`` and ``format``.
    """
    properties: dict[str, Any] = {"defaultSchema": default_schema, "format": "Delta"}
    properties.update(target_properties or {})
    return {
        "properties": {
            "source": {"type": "GenericMirror", "typeProperties": {}},
            "target": {"type": "MountedRelationalDatabase", "typeProperties": properties},
        }
    }


def landing_zone_url(onelake_url: str, workspace_id: str, item_id: str) -> str:
    """The item's landing zone, as the Fabric portal shows it."""
    return f"{onelake_url.rstrip('/')}/{workspace_id}/{item_id}/Files/LandingZone"


def init_mirror(
    api: FabricApi,
    request: InitRequest,
    *,
    open_landing: Callable[[StorageLocation], Storage] | None = None,
    progress: Callable[[str], None] = lambda line: None,
) -> MirrorTarget:
    """Make the open-mirrored database exist and run, prove its landing zone, write ``_partnerEvents.json``.

    Raises:
        ChainStepFailed: The first step that failed, with its fix.
    """
    item, created = ensure_mirrored_database(api, request, progress)
    item_id, name = str(item["id"]), str(item.get("displayName") or request.name or item["id"])
    updated = False
    if request.delta_change_data_feed and not created:
        updated = ensure_change_data_feed(api, request.workspace_id, item_id, progress)
    state, started = ensure_running(api, request, item_id, created=created, progress=progress)
    url = landing_zone_url(request.onelake_url, request.workspace_id, item_id)
    with (open_landing or open_landing_zone)(StorageLocation(url, request.credential)) as storage:
        probe_landing_zone(storage, url)
        _partner_events(storage, request, url)
    return MirrorTarget(request.workspace_id, item_id, name, url, state, created, started, updated)


def ensure_mirrored_database(
    api: FabricApi, request: InitRequest, progress: Callable[[str], None]
) -> tuple[dict[str, Any], bool]:
    """The item by id, else by display name, else created; and whether it was created now."""
    step = STEP_DATABASE
    try:
        if request.item_id:
            return api.get_mirrored_database(request.workspace_id, request.item_id), False
        if not request.name:
            raise ChainStepFailed(step, "no mirrored database given", "pass --name NAME (or --item-id ID)")
        found = [i for i in api.list_mirrored_databases(request.workspace_id) if i.get("displayName") == request.name]
        if found:
            progress(f"{step}: {request.name!r} exists ({found[0].get('id')}), reused")
            return found[0], False
        properties = dict(request.target_properties or {})
        if request.delta_change_data_feed:
            properties[CHANGE_DATA_FEED] = True
        definition = mirroring_definition(request.default_schema, properties)
        description = "Open mirroring landing zone fed by debezium-fabric-mirror"
        item = api.create_mirrored_database(request.workspace_id, request.name, definition, description)
    except FabricApiError as exc:
        raise explain(step, exc, request.workspace_id, request.item_id) from None
    if not item.get("id"):
        raise ChainStepFailed(step, "the create answer names no item id", "look for the item in the portal and rerun")
    progress(f"{step}: created {request.name!r} ({item['id']})")
    return item, True


def ensure_running(
    api: FabricApi, request: InitRequest, item_id: str, *, created: bool, progress: Callable[[str], None]
) -> tuple[str, bool]:
    """Start the database when it is new (or asked to), and wait until it runs; (state, whether started now)."""
    step = STEP_MIRRORING
    try:
        state, error = api.mirroring_status(request.workspace_id, item_id)
        if state.lower() == "running" and error is None:
            return state, False
        stopped_on_purpose = state.lower() in ("stopped", "stopping", "paused") and not created
        if stopped_on_purpose and not request.start:
            detail = f" ({error})" if error else ""
            raise ChainStepFailed(
                step,
                f"mirrored database {item_id} is {state}{detail}: mirroring would not read the files",
                "start it: rerun init with --start, or Start mirroring in the Fabric portal",
            )
        if state.lower() in _NOT_STARTABLE_YET:
            state = wait_startable(api, request.workspace_id, item_id, state)
        if state.lower() == "running":
            return state, False
        if state.lower() != "starting":
            api.start_mirroring(request.workspace_id, item_id)
            progress(f"{step}: started {item_id} (was {state})")
        return wait_running(api, request.workspace_id, item_id), True
    except FabricApiError as exc:
        raise explain(step, exc, request.workspace_id, item_id) from None


def wait_running(api: FabricApi, workspace_id: str, item_id: str) -> str:
    """Poll ``getMirroringStatus`` until ``Running`` (within the API's wait bound).

    Raises:
        ChainStepFailed: The database ended in another state, or reported an error.
        FabricApiError: A call failed, or the bound was used up.
    """
    what = f"wait until mirrored database {item_id} runs"
    delay = 1.0
    while True:
        state, error = api.mirroring_status(workspace_id, item_id)
        if error is not None:
            raise ChainStepFailed(STEP_MIRRORING, f"mirrored database {item_id} is {state} with error {error}", _PORTAL)
        if state.lower() == "running":
            return state
        if state.lower() not in _STARTING:
            raise ChainStepFailed(STEP_MIRRORING, f"mirrored database {item_id} went {state} after a start", _PORTAL)
        api.pause(delay, what, state)
        delay = min(2 * delay, START_POLL_MAX_S)


_PORTAL = "open the mirrored database in the Fabric portal to see why, then rerun"


def wait_startable(api: FabricApi, workspace_id: str, item_id: str, state: str) -> str:
    """Poll ``getMirroringStatus`` while the database is ``Initializing`` (one progress line per wait).

    Raises:
        ChainStepFailed: The database reported an error meanwhile.
        FabricApiError: A call failed, or the bound (``--max-wait``) was used up.
    """
    what = f"wait until mirrored database {item_id} can be started"
    delay = 1.0
    while state.lower() in _NOT_STARTABLE_YET:
        api.pause(delay, what, state)
        delay = min(2 * delay, START_POLL_MAX_S)
        state, error = api.mirroring_status(workspace_id, item_id)
        if error is not None:
            raise ChainStepFailed(STEP_MIRRORING, f"mirrored database {item_id} is {state} with error {error}", _PORTAL)
    return state


def ensure_change_data_feed(api: FabricApi, workspace_id: str, item_id: str, progress: Callable[[str], None]) -> bool:
    """Set ``enableDeltaChangeDataFeed`` in an existing database's definition; whether it was sent (not if set).

    Raises:
        ChainStepFailed: ``mirroring-definition``: the definition cannot be read or written.
    """
    try:
        parts = api.get_definition(workspace_id, item_id)
        mirroring = decode_mirroring(parts)
        if mirroring is None:
            raise ChainStepFailed(STEP_DEFINITION, f"{item_id}: no readable mirroring.json part", _PORTAL)
        target = mirroring.setdefault("properties", {}).setdefault("target", {})
        properties = target.setdefault("typeProperties", {})
        if properties.get(CHANGE_DATA_FEED) is True:
            progress(f"{STEP_DEFINITION}: {CHANGE_DATA_FEED} already set on {item_id}, nothing sent")
            return False
        properties[CHANGE_DATA_FEED] = True
        api.update_definition(workspace_id, item_id, [mirroring_part(mirroring)])
    except FabricApiError as exc:
        raise explain(STEP_DEFINITION, exc, workspace_id, item_id) from None
    progress(f"{STEP_DEFINITION}: {CHANGE_DATA_FEED} set on {item_id}")
    return True


def change_data_feed(api: FabricApi, workspace_id: str, item_id: str) -> bool | None:
    """Whether the definition sets the Delta change data feed (``None``: no readable ``mirroring.json``)."""
    mirroring = decode_mirroring(api.get_definition(workspace_id, item_id))
    if mirroring is None:
        return None
    target = (mirroring.get("properties") or {}).get("target") or {}
    return (target.get("typeProperties") or {}).get(CHANGE_DATA_FEED) is True


def mirroring_part(mirroring: Mapping[str, Any]) -> dict[str, Any]:
    """``mirroring.json`` as a definition part (``InlineBase64``)."""
    payload = base64.b64encode(orjson.dumps(mirroring)).decode("ascii")
    return {"path": "mirroring.json", "payload": payload, "payloadType": "InlineBase64"}


def decode_mirroring(parts: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The decoded ``mirroring.json`` part of a definition, or ``None``."""
    for part in parts:
        if part.get("path") == "mirroring.json" and part.get("payloadType", "InlineBase64") == "InlineBase64":
            try:
                decoded = orjson.loads(base64.b64decode(str(part.get("payload") or ""), validate=True))
            except (binascii.Error, ValueError):
                return None
            return decoded if isinstance(decoded, dict) else None
    return None


def probe_landing_zone(storage: Storage, url: str) -> None:
    """Create, append, flush, rename and delete a scratch ``_`` file: every write ``run`` makes.

    Raises:
        ChainStepFailed: ``landing-zone``, with what the answer means (folder missing, write refused, no answer).
    """
    scratch = f"_init_probe_{uuid.uuid4().hex}"
    try:
        storage.list_dir("")
        storage.create(f"{scratch}.part", b"debezium-fabric-mirror init probe\n")  # create, append, flush
        storage.rename_new(f"{scratch}.part", f"{scratch}.done")
        storage.delete(f"{scratch}.done")
    except StorageNotFound as exc:
        raise ChainStepFailed(
            STEP_LANDING,
            f"{url} not found ({exception_line(exc)})",
            "check the workspace and item ids; Fabric makes Files/LandingZone when it creates the database",
        ) from None
    except StorageAccessDenied as exc:
        raise ChainStepFailed(
            STEP_LANDING,
            f"{url} refused a write ({exception_line(exc)})",
            "give the connector's identity the Contributor role (or higher) on the workspace",
        ) from None
    except (StorageError, OSError) as exc:
        raise ChainStepFailed(
            STEP_LANDING, f"{url}: {exception_line(exc)}", "check the identity (AZURE_* variables) and retry"
        ) from None


#: Not-found codes of Microsoft's ErrorResponse, by what is missing (Fabric REST reference, "Common error codes"
#: of each operation; ``EntityNotFound`` is also what a workspace ID that does not exist answers).
_WORKSPACE_MISSING = frozenset({"workspacenotfound"})
_ITEM_MISSING = frozenset({"itemnotfound", "mirroreddatabasenotfound", "artifactnotfound"})
_OPERATION_MISSING = frozenset({"operationnotfound"})


def explain(step: str, exc: FabricApiError, workspace_id: str, item_id: str | None) -> ChainStepFailed:
    """One line for a refused Fabric call: what the answer means and what to change."""
    code = (exc.code or "").lower()
    if code == "notoken":
        return ChainStepFailed(STEP_API_TOKEN, exc.message, "check fabric_status.credential and its AZURE_* variables")
    fixes = {
        401: "check the identity's token (fabric_status.credential or fabric_status.bearer_token)",
        403: f"give the connector's identity the Contributor role (or higher) on workspace {workspace_id}",
        409: "choose another --name, or pass the existing item with --item-id",
    }
    fix = fixes.get(exc.status or 0)
    if exc.status == 404 or code in _WORKSPACE_MISSING | _ITEM_MISSING | _OPERATION_MISSING:
        fix = _not_found_fix(code, workspace_id, item_id)
    elif code == "waitexceeded":
        fix = "raise --max-wait, or look at the operation in the Fabric portal"
    elif exc.status is None:
        fix = "check fabric_status.api_url and the network to it"
    return ChainStepFailed(step, str(exc), fix or "see Fabric's message; rerun when fixed")


def _not_found_fix(code: str, workspace_id: str, item_id: str | None) -> str:
    """What to check for a not-found answer: the workspace, the item or the operation (by code, by what was asked)."""
    workspace_fix = f"check --workspace-id: no workspace {workspace_id} is visible to this identity"
    if code in _WORKSPACE_MISSING or (item_id is None and code not in _ITEM_MISSING | _OPERATION_MISSING):
        return workspace_fix
    if code in _OPERATION_MISSING:
        return "the long-running operation is gone (operations expire): rerun init, it resumes from what exists"
    if code in _ITEM_MISSING:
        return f"check --item-id {item_id}: no such mirrored database in workspace {workspace_id}"
    # EntityNotFound (or no code) with both ids asked: either may be the missing one.
    return (
        f"check --workspace-id and --item-id: workspace {workspace_id} or mirrored database {item_id} "
        "is not visible to this identity"
    )


def fabric_api_for(settings: ConnectorSettings, *, max_wait_s: float, progress: Callable[[str], None]) -> FabricApi:
    """A ``FabricApi`` with ``settings.fabric_status``'s URL and identity (static token or azure-identity).

    Raises:
        ChainStepFailed: ``fabric-api-token``: the identity's settings are incomplete.
    """
    config = settings.fabric_status
    try:
        token = (
            static_token(config.bearer_token)
            if config.bearer_token is not None
            else identity_token(config.credential, "fabric_status.credential")
        )
    except ConfigError as exc:
        raise ChainStepFailed(STEP_API_TOKEN, str(exc), "complete the identity's AZURE_* settings") from None
    return FabricApi(
        config.api_url, token, timeout_s=config.request_timeout_s, max_wait_s=max_wait_s, progress=progress
    )


def _partner_events(storage: Storage, request: InitRequest, url: str) -> None:
    from connector.landing_zone.metadata import ensure_partner_events

    try:
        ensure_partner_events(storage, request.partner_name, request.source_type, request.source_version)
    except (StorageError, OSError) as exc:
        raise ChainStepFailed(
            STEP_PARTNER_EVENTS, f"{url}/_partnerEvents.json: {exception_line(exc)}", _PORTAL
        ) from None


def open_landing_zone(location: StorageLocation) -> Storage:
    """The landing zone on OneLake; incomplete identity settings are a ``landing-zone-token`` failure."""
    from connector.storage.errors import InvalidCredential

    try:
        return location.open()
    except (InvalidCredential, ValueError) as exc:
        kind = location.identity.kind
        raise ChainStepFailed(
            STEP_LANDING_TOKEN, f"landing_zone.credential {kind}: {exc}", "complete its AZURE_* settings"
        ) from None
