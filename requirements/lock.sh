#!/usr/bin/env bash
# Refresh the lock files from pyproject.toml's ranges: the newest versions they allow, for Python 3.11 on
# linux x86_64 (the image, CI and the quick start), every distribution with its sha256.
#
#   bash requirements/lock.sh            (uv from .venv, installed by the test extra, else from PATH)
#
#   requirements/test.txt     runtime + verify + test extras: deploy/local/setup-tests.sh (quick start, CI)
#   requirements/runtime.txt  runtime only, the same versions as test.txt: deploy/Dockerfile
#   requirements/spark.txt    the pyspark pin both are resolved with (written from the pom)
#
# pyspark is pinned to the Spark of deploy/local/maven/spark-kafka/pom.xml: Spark's Kafka source jars must be
# the installed Spark's own.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

UV=${UV:-}
if [[ -z $UV ]]; then
  if [[ -x .venv/bin/uv ]]; then UV=.venv/bin/uv; else UV=uv; fi
fi
spark=$(sed -n 's#.*<spark\.version>\(.*\)</spark\.version>.*#\1#p' deploy/local/maven/spark-kafka/pom.xml)
[[ -n $spark ]] || { echo "lock.sh: no <spark.version> in deploy/local/maven/spark-kafka/pom.xml" >&2; exit 1; }

pins=requirements/spark.txt
printf '# Written by requirements/lock.sh from deploy/local/maven/spark-kafka/pom.xml: the Spark whose Kafka jars we fetch.\npyspark==%s\n' "$spark" >"$pins"
common=(--quiet --generate-hashes --python-version 3.11 --python-platform x86_64-manylinux_2_28
  --custom-compile-command "bash requirements/lock.sh")
"$UV" pip compile pyproject.toml --extra test --upgrade -c "$pins" "${common[@]}" -o requirements/test.txt
# The image's subset, resolved within test.txt's versions so both install the same release of every package.
"$UV" pip compile pyproject.toml -c requirements/test.txt "${common[@]}" -o requirements/runtime.txt
echo "lock.sh: requirements/test.txt and requirements/runtime.txt (pyspark $spark)" >&2
