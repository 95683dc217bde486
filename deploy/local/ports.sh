# shellcheck shell=bash
# Port and process helpers shared by kafka.sh, registry.sh and stack.sh (sourced, not run).

# Whether anything accepts on 127.0.0.1:$1, or ss lists it as listening.
port_in_use() {
  if (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; then
    return 0
  fi
  if command -v ss >/dev/null 2>&1 && [[ -n $(ss -Htln "sport = :$1" 2>/dev/null) ]]; then
    return 0
  fi
  return 1
}

# A free port below the Linux ephemeral range, not equal to $1 (if given); fails after 200 tries.
free_port() {
  local avoid=${1:-0} p i
  for ((i = 0; i < 200; i++)); do
    p=$((20000 + RANDOM % 12000))
    [[ $p -ne $avoid ]] || continue
    port_in_use "$p" || { echo "$p"; return 0; }
  done
  echo "could not find a free port" >&2
  return 1
}

# Whether process $1 still runs. An exited daemon stays a zombie until PID 1 reaps it, which some container
# inits do only every few seconds (`kill -0` succeeds on a zombie): a zombie counts as gone.
alive() {
  local stat
  read -r stat 2>/dev/null <"/proc/$1/stat" || return 1
  stat=${stat##*) } # the name in parentheses may hold spaces; the state follows it
  [[ ${stat%% *} != Z ]]
}

# Wait until pid $1 is gone, at most $2 tenths of a second; fails if it still runs.
wait_gone() {
  local i
  for ((i = 0; i < $2; i++)); do
    alive "$1" || return 0
    sleep 0.1
  done
  ! alive "$1"
}

# Stop pid $1 (called $2 in messages): SIGTERM, up to 30 s, then SIGKILL and up to 5 s more.
terminate_pid() {
  local pid=$1 name=$2
  kill -TERM "$pid" 2>/dev/null || true
  wait_gone "$pid" 300 && return 0
  echo "$name did not stop after 30s; killing it" >&2
  kill -KILL "$pid" 2>/dev/null || true
  wait_gone "$pid" 50 || true
}
