#!/usr/bin/env bash
# Start a single-node Slurm on this machine for the tests, everything on loopback:
# munge, MariaDB + slurmdbd (so that sacct works), slurmctld and slurmd, with partitions
# cpu, gpu and tpu and two GPU GRES backed by placeholder character devices (mknod).
#
#   tests/slurm/start-slurm.sh DIR     # DIR: an empty or missing state folder
#   source DIR/env                     # SLURM_CONF for sbatch, sacct, squeue, ...
#   tests/slurm/stop-slurm.sh DIR
#
# Installs nothing (see .ci/run for the packages: slurm-wlm slurmdbd munge
# mariadb-server). Runs the daemons as root with cgroup plugins off (a container without
# systemd). Exits non-zero, with the daemons' logs on stderr, when Slurm does not come up.
set -euo pipefail

DIR=${1:?usage: start-slurm.sh STATE_DIR}
mkdir -p "$DIR"
DIR=$(cd "$DIR" && pwd)
chmod 755 "$DIR"  # munge wants its socket reachable by everyone
HERE=$(cd "$(dirname "$0")" && pwd)
NODE=$(hostname -s)
CLUSTER=xstudy
# munge's socket path must stay short (sun_path holds 108 bytes).
if [ "${#DIR}" -gt 80 ]; then
    echo "start-slurm.sh: state folder path too long for munge's socket: $DIR" >&2
    exit 2
fi

for tool in munged mungekey mariadbd mariadb-install-db mariadb slurmdbd slurmctld slurmd sacctmgr sinfo; do
    command -v "$tool" >/dev/null || {
        echo "start-slurm.sh: $tool not found (apt-get install slurm-wlm slurmdbd munge mariadb-server)" >&2
        exit 3
    }
done

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

fail() {
    echo "start-slurm.sh: $*" >&2
    for log in "$DIR"/log/*; do
        [ -f "$log" ] && { echo "==> $log <==" >&2; tail -n 30 "$log" >&2; }
    done
    "$HERE/stop-slurm.sh" "$DIR" >/dev/null 2>&1 || true
    exit 1
}

wait_for() {  # wait_for SECONDS DESCRIPTION COMMAND...
    local limit=$1 what=$2
    shift 2
    local deadline=$((SECONDS + limit)) out
    until out=$("$@" 2>&1); do
        [ $SECONDS -lt $deadline ] || fail "$what did not come up within ${limit} s: $* said: $out"
        sleep 0.5
    done
}

mkdir -p "$DIR"/{log,munge,mysql,state,spool,dev,run}
chmod 755 "$DIR/munge"
MYSQL_PORT=$(free_port)
DBD_PORT=$(free_port)
CTLD_PORT=$(free_port)
SLURMD_PORT=$(free_port)
# All CPUs of this machine: nproc alone would obey OMP_NUM_THREADS and OMP_THREAD_LIMIT.
CPUS=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)
MEM_MB=$(awk '/MemTotal/ {print int($2 / 1024 * 0.9)}' /proc/meminfo)

# --- munge: own key and socket, so that a system munge (if any) is left alone ---
mungekey --create --keyfile="$DIR/munge/munge.key" --force >/dev/null
chmod 400 "$DIR/munge/munge.key"
munged --force --socket="$DIR/munge/munge.socket" --key-file="$DIR/munge/munge.key" \
    --pid-file="$DIR/run/munged.pid" --log-file="$DIR/log/munged.log" \
    --seed-file="$DIR/munge/munged.seed" 2>>"$DIR/log/munged.log" \
    || fail "munged did not start"
wait_for 10 munge test -S "$DIR/munge/munge.socket"

# --- MariaDB on 127.0.0.1 only, data in DIR ---
mariadb-install-db --no-defaults --datadir="$DIR/mysql" --user=root \
    --auth-root-authentication-method=normal --skip-test-db >"$DIR/log/mariadb-install.log" 2>&1 \
    || fail "mariadb-install-db failed"
mariadbd --no-defaults --datadir="$DIR/mysql" --user=root --bind-address=127.0.0.1 \
    --port="$MYSQL_PORT" --socket="$DIR/run/mysqld.sock" --pid-file="$DIR/run/mysqld.pid" \
    --log-error="$DIR/log/mariadb.log" --innodb-buffer-pool-size=64M --skip-name-resolve \
    >/dev/null 2>&1 &
wait_for 60 MariaDB mariadb --no-defaults --socket="$DIR/run/mysqld.sock" -u root -e "SELECT 1"
mariadb --no-defaults --socket="$DIR/run/mysqld.sock" -u root <<SQL || fail "cannot create the slurm database user"
CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY 'slurm';
GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';
FLUSH PRIVILEGES;
SQL

# --- placeholder GPU device files for the two GPU GRES ---
for i in 0 1; do
    [ -e "$DIR/dev/nvidia$i" ] || mknod "$DIR/dev/nvidia$i" c 195 "$i" \
        || fail "mknod $DIR/dev/nvidia$i failed"
done

# --- Slurm configuration ---
cat >"$DIR/slurm.conf" <<CONF
# Single-node test cluster written by tests/slurm/start-slurm.sh.
ClusterName=$CLUSTER
SlurmctldHost=$NODE(127.0.0.1)
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
CommunicationParameters=NoInAddrAny
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$DIR/munge/munge.socket
CredType=cred/munge
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool
SlurmctldPidFile=$DIR/run/slurmctld.pid
SlurmdPidFile=$DIR/run/slurmd.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
MpiDefault=none
SwitchType=switch/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes=gpu
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
AccountingStoragePort=$DBD_PORT
# The munge socket for slurmdbd connections (AuthInfo covers the others).
AccountingStoragePass=$DIR/munge/munge.socket
AccountingStorageTRES=gres/gpu
JobCompType=jobcomp/none
MailProg=/bin/true
# sacct shows the executor plugin's --comment (rule and wildcards of each job).
AccountingStoreFlags=job_comment
ReturnToService=2
MinJobAge=300
# Generous timeouts: a loaded 2-core CI machine must not make the node look dead.
SlurmdTimeout=300
MessageTimeout=30
InactiveLimit=0
KillWait=5
NodeName=$NODE NodeAddr=127.0.0.1 NodeHostname=$NODE CPUs=$CPUS RealMemory=$MEM_MB Gres=gpu:2 State=UNKNOWN
PartitionName=cpu Nodes=$NODE Default=YES MaxTime=INFINITE State=UP
PartitionName=gpu Nodes=$NODE MaxTime=INFINITE State=UP
PartitionName=tpu Nodes=$NODE MaxTime=INFINITE State=UP
CONF

cat >"$DIR/gres.conf" <<CONF
AutoDetect=off
NodeName=$NODE Name=gpu File=$DIR/dev/nvidia0
NodeName=$NODE Name=gpu File=$DIR/dev/nvidia1
CONF

cat >"$DIR/slurmdbd.conf" <<CONF
AuthType=auth/munge
AuthInfo=socket=$DIR/munge/munge.socket
DbdAddr=127.0.0.1
DbdHost=$NODE
DbdPort=$DBD_PORT
SlurmUser=root
LogFile=$DIR/log/slurmdbd.log
PidFile=$DIR/run/slurmdbd.pid
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$MYSQL_PORT
StorageUser=slurm
StoragePass=slurm
StorageLoc=slurm_acct_db
CONF
chmod 600 "$DIR/slurmdbd.conf"

# Commands inside jobs must find this config without SLURM_CONF: the jobstep executor
# drops every SLURM_* variable but the job's identity before its srun. Slurm's commands
# look for SLURM_CONF, then /etc/slurm/slurm.conf, then /run/slurm/conf/slurm.conf (where
# a configless slurmd links its cached config): link this config there, as such a slurmd
# would. A system config in /etc/slurm would take precedence, so refuse to start then.
if [ -e /etc/slurm/slurm.conf ]; then
    fail "/etc/slurm/slurm.conf exists: commands in test jobs would use that cluster"
fi
# A link left by a test Slurm that was killed before stop-slurm.sh ran (its slurmctld no
# longer alive) is stale: remove it. One whose slurmctld still runs belongs to another
# test Slurm on this machine: refuse, rather than point its jobs at this config.
if [ -L /run/slurm/conf ]; then
    OTHER=$(readlink /run/slurm/conf)
    OTHER_PID=$(cat "$OTHER/run/slurmctld.pid" 2>/dev/null || true)
    if [ -n "$OTHER_PID" ] && kill -0 "$OTHER_PID" 2>/dev/null; then
        fail "/run/slurm/conf links to $OTHER, whose slurmctld ($OTHER_PID) still runs: stop that Slurm first (tests/slurm/stop-slurm.sh $OTHER)"
    fi
    echo "start-slurm.sh: removing the stale link /run/slurm/conf -> $OTHER (no slurmctld runs there)" >&2
    rm -f /run/slurm/conf
fi
if [ -e /run/slurm/conf ]; then
    fail "/run/slurm/conf exists and is not a link (another Slurm on this machine?); stop it first"
fi
mkdir -p /run/slurm
ln -s "$DIR" /run/slurm/conf

cat >"$DIR/env" <<ENV
export SLURM_CONF=$DIR/slurm.conf
ENV
export SLURM_CONF="$DIR/slurm.conf"

# --- daemons ---
slurmdbd || fail "slurmdbd did not start"
wait_for 60 slurmdbd sacctmgr -i show cluster
sacctmgr -i add cluster "$CLUSTER" >/dev/null 2>&1 || true
slurmctld || fail "slurmctld did not start"
wait_for 60 slurmctld scontrol ping
slurmd || fail "slurmd did not start"
node_idle() { sinfo -h -N -n "$NODE" -o %t | grep -qx idle; }
wait_for 60 "the node (idle in sinfo)" node_idle
# A first job in each partition: jobs launch, and accounting records them.
for partition in cpu gpu tpu; do
    timeout 60 srun -p "$partition" -N1 -n1 -t 1 true \
        || fail "a first job in partition $partition did not run"
done
wait_for 30 "sacct (accounting)" sacct -n -X
echo "Slurm is up: SLURM_CONF=$SLURM_CONF ($(sinfo -h -o '%P %D %t %G' | tr '\n' ';'))"
