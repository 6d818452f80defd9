#!/usr/bin/env bash
# A one-node SLURM cluster on this machine, for the SLURM tests and for trying a sweep:
#
#   scripts/local_slurm.sh start [DIR]   start munged, slurmctld and slurmd; prints `export SLURM_CONF=...`
#   scripts/local_slurm.sh stop  [DIR]   stop the daemons started from DIR (by their pid files)
#   scripts/local_slurm.sh env   [DIR]   print `export SLURM_CONF=...` for a running cluster
#
# DIR (default $SCALESCOPE_SLURM_DIR, else /tmp/scalescope-slurm) holds everything: the munge
# key and socket, slurm.conf, state, spool, pid and log files. Nothing in /etc is read or
# changed: munged gets --key-file/--socket, the daemons get -f DIR/slurm.conf, and clients
# find the cluster through SLURM_CONF. Needs root (slurmd starts jobs as their user) and
# Debian's munge, slurmctld, slurmd and slurm-client (scripts/system_deps.sh installs them).
#
# The node is this host (NodeAddr 127.0.0.1) with SCALESCOPE_SLURM_CPUS CPUs (default: the
# cores, at least 4; more than the cores with SlurmdParameters=config_overrides, and then
# TaskPlugin=task/none since tasks cannot be bound to CPUs that do not exist), no GPU GRES,
# one partition `debug`, no accounting database (sacct is unavailable; finished jobs stay
# visible to squeue/scontrol for MinJobAge = 1 h), KillWait 5 s.
# Exit status: 0 started (or already running), 1 cannot start (the reason on stderr).
set -uo pipefail
export PATH="$PATH:/usr/sbin:/sbin"  # the daemons live in sbin, which a user's PATH may lack

cmd="${1:-}"
DIR="${2:-${SCALESCOPE_SLURM_DIR:-/tmp/scalescope-slurm}}"
NPROC="$(nproc 2>/dev/null || echo 1)"
CPUS="${SCALESCOPE_SLURM_CPUS:-$(( NPROC > 4 ? NPROC : 4 ))}"
# task/affinity binds tasks to real CPUs: only when the node declares no more CPUs than exist
if (( CPUS <= NPROC )); then TASK_PLUGIN=task/affinity; else TASK_PLUGIN=task/none; fi
CTLD_PORT="${SCALESCOPE_SLURM_PORT:-16817}"
CONF="$DIR/slurm.conf"
say() { printf '[local_slurm] %s\n' "$*" >&2; }
die() { say "cannot start: $*"; exit 1; }

alive() {  # alive PIDFILE: the process named in it runs
  [[ -s "$1" ]] && kill -0 "$(cat "$1")" 2>/dev/null
}

stop_one() {  # stop_one NAME PIDFILE
  local pidfile="$2" pid
  alive "$pidfile" || { rm -f "$pidfile"; return 0; }
  pid="$(cat "$pidfile")"
  kill -TERM "$pid" 2>/dev/null
  for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$pid" 2>/dev/null; then say "$1 ($pid) did not stop on SIGTERM: SIGKILL"; kill -KILL "$pid" 2>/dev/null; fi
  rm -f "$pidfile"
}

cancel_jobs() {  # jobs outlive slurmd (slurmstepd runs them): cancel them and wait for the end
  alive "$DIR/run/slurmctld.pid" && alive "$DIR/run/slurmd.pid" || return 0
  SLURM_CONF="$CONF" scancel --quiet --full $(SLURM_CONF="$CONF" squeue -h -o %i 2>/dev/null) 2>/dev/null || true
  for _ in $(seq 60); do
    [[ -z "$(SLURM_CONF="$CONF" squeue -h -o %i 2>/dev/null)" ]] && return 0
    sleep 0.5
  done
  say "jobs still listed after 30 s: $(SLURM_CONF="$CONF" squeue -h -o '%i %T' 2>/dev/null | paste -sd, -)"
}

stop() {
  [[ -d "$DIR" ]] || return 0
  cancel_jobs
  stop_one slurmd "$DIR/run/slurmd.pid"
  stop_one slurmctld "$DIR/run/slurmctld.pid"
  stop_one munged "$DIR/run/munged.pid"
  say "stopped the cluster in $DIR"
}

write_conf() {
  local host="$1"
  cat > "$CONF" <<EOF
# Written by scripts/local_slurm.sh: a private one-node cluster (nothing in /etc is used).
ClusterName=scalescope-local
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$CTLD_PORT
SlurmdPort=$((CTLD_PORT + 1))
SrunPortRange=$((CTLD_PORT + 100))-$((CTLD_PORT + 400))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$DIR/munge/munge.socket
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool/%n
SlurmctldPidFile=$DIR/run/slurmctld.pid
SlurmdPidFile=$DIR/run/slurmd.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=$TASK_PLUGIN
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
MpiDefault=none
ReturnToService=2
SlurmdParameters=config_overrides
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MinJobAge=3600
KillWait=5
InactiveLimit=0
Waittime=0
SlurmdTimeout=60
MessageTimeout=10
NodeName=$host NodeAddr=127.0.0.1 CPUs=$CPUS State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP
EOF
}

start() {
  [[ "$(id -u)" == 0 ]] || die "needs root (slurmd runs jobs as their user)"
  local missing=()
  for b in munged slurmctld slurmd sbatch squeue scontrol sinfo; do
    command -v "$b" >/dev/null 2>&1 || missing+=("$b")
  done
  (( ${#missing[@]} == 0 )) || die "missing ${missing[*]} (Debian: apt-get install munge slurmctld slurmd slurm-client; or bash scripts/system_deps.sh as root)"
  if alive "$DIR/run/slurmctld.pid" && alive "$DIR/run/slurmd.pid" && alive "$DIR/run/munged.pid"; then
    say "already running in $DIR"
    echo "export SLURM_CONF=$CONF"
    return 0
  fi
  stop 2>/dev/null
  local host
  host="$(hostname -s)"
  mkdir -p "$DIR"/{munge,state,spool,run,log}
  chmod 0755 "$DIR" "$DIR/run" "$DIR/log"
  chmod 0700 "$DIR/munge" "$DIR/state"
  if [[ ! -s "$DIR/munge/munge.key" ]]; then
    (umask 077; head -c 1024 /dev/urandom > "$DIR/munge/munge.key") || die "cannot write the munge key"
    chmod 0400 "$DIR/munge/munge.key"
  fi
  munged --key-file="$DIR/munge/munge.key" --socket="$DIR/munge/munge.socket" \
    --pid-file="$DIR/run/munged.pid" --log-file="$DIR/log/munged.log" \
    --seed-file="$DIR/munge/munged.seed" --force 2>>"$DIR/log/munged.log" \
    || die "munged did not start (see $DIR/log/munged.log)"
  write_conf "$host"
  export SLURM_CONF="$CONF"
  slurmctld -f "$CONF" -i 2>>"$DIR/log/slurmctld.log" || { stop; die "slurmctld did not start (see $DIR/log/slurmctld.log)"; }
  slurmd -f "$CONF" 2>>"$DIR/log/slurmd.log" || { stop; die "slurmd did not start (see $DIR/log/slurmd.log)"; }
  # up when the node is idle (slurmd registered with slurmctld)
  local state=""
  for _ in $(seq 60); do
    state="$(sinfo -h -N -o '%T' 2>/dev/null | head -n 1)"
    [[ "$state" == idle* || "$state" == mixed* || "$state" == allocated* ]] && break
    sleep 0.5
  done
  if [[ "$state" != idle* && "$state" != mixed* && "$state" != allocated* ]]; then
    say "node state '${state:-none}' after 30 s; last lines of the logs:"
    tail -n 5 "$DIR/log/slurmctld.log" "$DIR/log/slurmd.log" >&2
    stop
    die "the node did not come up"
  fi
  say "cluster scalescope-local up: node $host ($CPUS CPUs), partition debug; logs in $DIR/log"
  echo "export SLURM_CONF=$CONF"
}

case "$cmd" in
  start) start ;;
  stop) stop ;;
  env) alive "$DIR/run/slurmctld.pid" || { say "no cluster running in $DIR"; exit 1; }; echo "export SLURM_CONF=$CONF" ;;
  *) echo "usage: $0 start|stop|env [DIR]" >&2; exit 2 ;;
esac
