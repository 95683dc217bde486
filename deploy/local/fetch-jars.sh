#!/usr/bin/env bash
# Fetch jar sets from Maven Central into ${JARS_DIR:-<repo>/.cache/jars}/<name>/.
#
#   fetch-jars.sh NAME...            fetch each set (skipped when <dir>/.complete names its pom's hash)
#   fetch-jars.sh --print NAME       fetch if needed, then print the set's jar paths
#                                    comma-joined on stdout (usable as spark.jars)
#
# Sets are the poms under deploy/local/maven/<name>/pom.xml (kafka, spark-kafka, connect-debezium,
# connect-debezium-mariadb, connect-avro, apicurio-registry). A dependency of type zip (an application
# assembly, e.g. the apicurio-registry set) is unpacked into the set's directory instead of being kept as a zip.
# Progress and Maven output go to stderr.
set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_ROOT=$(cd "$SCRIPT_DIR/../.." && pwd)
JARS_DIR=${JARS_DIR:-$REPO_ROOT/.cache/jars}
MVN=${MVN:-mvn}

usage() {
  echo "usage: $0 [--print] NAME..." >&2
  echo "sets: $(cd "$SCRIPT_DIR/maven" && echo */ | tr -d /)" >&2
  exit 2
}

# A set is current when its .complete holds the sha256 of the pom it was fetched with: a changed pom (a new
# Spark, say) fetches the set again. An empty .complete (written before sets were stamped) stays current
# until its pom changes.
is_current() {
  local dest=$1 pom=$2 stamp=$3 have
  [[ -f $dest/.complete ]] || return 1
  have=$(<"$dest/.complete")
  [[ $have == "$stamp" ]] && return 0
  [[ -z $have && ! $pom -nt $dest/.complete ]]
}

fetch_one() {
  local name=$1
  local pom=$SCRIPT_DIR/maven/$name/pom.xml
  local dest=$JARS_DIR/$name
  if [[ ! -f $pom ]]; then
    echo "fetch-jars: unknown jar set '$name' (no $pom)" >&2
    usage
  fi
  local stamp
  stamp=$(sha256sum "$pom" | cut -d' ' -f1)
  is_current "$dest" "$pom" "$stamp" && return 0

  mkdir -p "$JARS_DIR"
  local lock_fd
  # Serialise concurrent fetches of the same set; re-check after taking the lock.
  exec {lock_fd}>"$JARS_DIR/.$name.lock"
  flock "$lock_fd"
  if is_current "$dest" "$pom" "$stamp"; then
    exec {lock_fd}>&-
    return 0
  fi

  echo "fetch-jars: fetching '$name' into $dest" >&2
  local start=$SECONDS tmp
  tmp=$(mktemp -d "$JARS_DIR/.$name.tmp.XXXXXX")
  # -q prints errors on stdout; keep our stdout clean for --print and callers.
  if ! "$MVN" -q -B -Dstyle.color=never -f "$pom" dependency:copy-dependencies \
      -DoutputDirectory="$tmp" -Dmdep.overWriteReleases=true 1>&2; then
    rm -rf "$tmp"
    echo "fetch-jars: maven failed for '$name'" >&2
    exec {lock_fd}>&-
    return 1
  fi
  local zip
  for zip in "$tmp"/*.zip; do
    [[ -f $zip ]] || continue
    if ! "${PYTHON:-python3}" -m zipfile -e "$zip" "$tmp" 1>&2; then
      rm -rf "$tmp"
      echo "fetch-jars: could not unpack $(basename "$zip") for '$name'" >&2
      exec {lock_fd}>&-
      return 1
    fi
    rm -f "$zip"
  done
  if ! compgen -G "$tmp/*.jar" >/dev/null; then
    rm -rf "$tmp"
    echo "fetch-jars: no jars produced for '$name'" >&2
    exec {lock_fd}>&-
    return 1
  fi
  rm -rf "$dest"
  mv "$tmp" "$dest"
  chmod 755 "$dest"
  echo "$stamp" >"$dest/.complete"
  echo "fetch-jars: '$name' done ($(find "$dest" -name '*.jar' | wc -l) jars, $((SECONDS - start))s)" >&2
  exec {lock_fd}>&-
}

print=0
if [[ ${1:-} == --print ]]; then
  print=1
  shift
  [[ $# -eq 1 ]] || usage
fi
[[ $# -ge 1 ]] || usage

for name in "$@"; do
  fetch_one "$name"
done

if ((print)); then
  find "$JARS_DIR/$1" -maxdepth 1 -name '*.jar' | LC_ALL=C sort | paste -sd, -
fi
