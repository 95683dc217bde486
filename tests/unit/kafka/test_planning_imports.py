"""Spark's planning processes import little: the source and its reader unpickle without Arrow, pydantic or librdkafka.

Spark starts a Python process of its own for each planning step of a Python data source (creating the source,
planning the read, the long-lived planner), one after another before the first batch, and each one unpickles the
source or its reader and so imports ``connector.kafka.stream_source`` and what the pickled attributes name. Each
heavy import there was paid three times over before the first batch (0.25-0.36 CPU-s a process, measured).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from pyspark import cloudpickle

from connector.collect.kafka_spec import KafkaReadSpec
from connector.kafka.stream_source import configured_source

ROOT = Path(__file__).resolve().parents[3]
#: What no planning step needs: the executors' Arrow reader, the identity's settings, the Azure SDK, and
#: librdkafka (imported by the one process that asks the brokers for offsets, when it first does).
HEAVY = (
    "pyarrow",
    "numpy",
    "pandas",
    "pydantic",
    "azure",
    "confluent_kafka",
    "connector.collect.kafka_read",
    "connector.kafka.offsets_planner",
    "connector.storage.identity",
)

# As Spark's processes do: the class unpickled and made an instance (create_data_source), that instance unpickled
# and asked for its stream reader, pickled for the executors (plan_data_source_read), the reader's planning steps
# that need no broker, and the partitions pickled (the streaming source runner).
_CHILD = """
import json, pickle, sys
from pyspark import cloudpickle

with open(sys.argv[1], "rb") as pickled:
    source_class = pickle.load(pickled)
source = pickle.loads(cloudpickle.dumps(source_class(json.loads(sys.argv[2]))))
reader = source.streamReader(None)
pickle.loads(cloudpickle.dumps(reader))
reader.getDefaultReadLimit()
partitions = reader.partitions({"db.t": {"0": 0}}, {"db.t": {"0": 10, "1": 5}})
pickle.loads(cloudpickle.dumps(partitions))
heavy = json.loads(sys.argv[3])
print(json.dumps(sorted(m for m in sys.modules if any(m == h or m.startswith(h + ".") for h in heavy))))
"""


def test_the_planning_steps_import_no_arrow_pydantic_or_librdkafka(tmp_path: Path) -> None:
    entra = 'cdc-mirror-entra:{"kind":"workload_identity","scope":"https://ns.servicebus.windows.net/.default"}'
    admin = {"bootstrap.servers": "ns.servicebus.windows.net:9093", "sasl.oauthbearer.config": entra}
    spec = KafkaReadSpec(tuple(sorted(admin.items())), headers="debezium")
    pickled = tmp_path / "source.pickle"
    pickled.write_bytes(cloudpickle.dumps(configured_source(admin, spec)))
    options = {
        "checkpoint": str(tmp_path / "cp"),
        "subscribePattern": "^(?:db\\..*)$",
        "headers": "debezium",
        "maxOffsetsPerTrigger": "1000",
    }
    child = subprocess.run(
        [sys.executable, "-c", _CHILD, str(pickled), json.dumps(options), json.dumps(HEAVY)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
        check=False,
    )
    assert child.returncode == 0, child.stderr[-3000:]
    imported = json.loads(child.stdout.splitlines()[-1])
    heavy = sorted({name for name in HEAVY for module in imported if module == name or module.startswith(name + ".")})
    assert heavy == [], f"Spark's planning processes would import {', '.join(heavy)}"
