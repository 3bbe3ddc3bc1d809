#!/usr/bin/env bash
# Stop the test Slurm started by start-slurm.sh DIR: slurmd, slurmctld, slurmdbd,
# MariaDB and munged, each by the pid file it wrote under DIR/run. Leaves DIR in place
# (its logs help when a test failed); removing it is the caller's choice.
set -uo pipefail
DIR=${1:?usage: stop-slurm.sh STATE_DIR}
DIR=$(cd "$DIR" 2>/dev/null && pwd) || exit 0  # nothing started there

stop_pid() {  # stop_pid NAME PIDFILE
    local pidfile=$2 pid
    [ -f "$pidfile" ] || return 0
    pid=$(cat "$pidfile" 2>/dev/null) || return 0
    [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 0
    kill -TERM "$pid" 2>/dev/null
    for _ in $(seq 1 40); do
        kill -0 "$pid" 2>/dev/null || return 0
        sleep 0.25
    done
    echo "stop-slurm.sh: $1 ($pid) did not stop on TERM; killing it" >&2
    kill -KILL "$pid" 2>/dev/null
}

stop_pid slurmd "$DIR/run/slurmd.pid"
stop_pid slurmctld "$DIR/run/slurmctld.pid"
stop_pid slurmdbd "$DIR/run/slurmdbd.pid"
stop_pid mariadbd "$DIR/run/mysqld.pid"
stop_pid munged "$DIR/run/munged.pid"
# slurmd's link to its cached configuration (configless mode), if it points into DIR.
if [ -L /run/slurm/conf ] && [ "$(readlink /run/slurm/conf)" = "$DIR" ]; then
    rm -f /run/slurm/conf
    rmdir /run/slurm 2>/dev/null || true  # only when nothing else is in it
fi
exit 0
