#!/bin/bash
# Start a one-node Slurm cluster on this machine, to try the kit's Slurm
# recipes (grade.sbatch, merge.sbatch, submit.sh) before a real cluster:
# docs/cluster.md. Debian or Ubuntu, as root, after
#     apt-get install slurm-wlm munge
# It writes /etc/slurm/slurm.conf naming this host (one node, one
# partition, no accounting, no cgroups), starts munged, slurmctld and
# slurmd if they are not running, and waits until the node is idle.
# Running it again changes nothing that runs; a slurm.conf it did not
# write is left alone (exit 3). CPUS=8 declares more CPUs
# than the machine has (a trial, not a benchmark).
set -euo pipefail

if [ "$(id -u)" != 0 ]; then
    echo "one-node.sh: run as root (it writes /etc/slurm and starts daemons)" >&2
    exit 2
fi
for daemon in munged slurmctld slurmd; do
    if ! command -v "$daemon" >/dev/null && [ ! -x "/usr/sbin/$daemon" ]; then
        echo "one-node.sh: $daemon is missing: apt-get install slurm-wlm munge" >&2
        exit 2
    fi
done
export PATH="$PATH:/usr/sbin"

host=$(hostname -s)
cpus=${CPUS:-$(nproc)}
memory=$(awk '/^MemTotal:/ {print int($2 / 1024)}' /proc/meminfo)
conf=/etc/slurm/slurm.conf
marker="# Written by the grading kit's cluster/slurm/one-node.sh"
mkdir -p /etc/slurm /var/lib/slurm/slurmctld /var/lib/slurm/slurmd \
    /var/log/slurm /run/munge

wanted=$(cat <<CONF
$marker: one node, for trials.
ClusterName=trial
SlurmctldHost=$host
SlurmUser=root
AuthType=auth/munge
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
ReturnToService=2
MinJobAge=600
StateSaveLocation=/var/lib/slurm/slurmctld
SlurmdSpoolDir=/var/lib/slurm/slurmd
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
NodeName=$host CPUs=$cpus RealMemory=$memory State=UNKNOWN
PartitionName=trial Nodes=$host Default=YES MaxTime=INFINITE State=UP
CONF
)
if [ -s "$conf" ] && [ "$(head -c ${#marker} "$conf")" != "$marker" ]; then
    echo "one-node.sh: $conf is not one this script wrote: this machine has a Slurm of its own; leaving it alone" >&2
    exit 3
fi
changed=no
if [ ! -f "$conf" ] || [ "$(cat "$conf")" != "$wanted" ]; then
    printf '%s\n' "$wanted" > "$conf"
    changed=yes
fi

if [ ! -s /etc/munge/munge.key ]; then
    mungekey --create --keyfile=/etc/munge/munge.key
fi
chown munge:munge /etc/munge/munge.key /run/munge
chmod 0400 /etc/munge/munge.key
if ! munge -n </dev/null >/dev/null 2>&1; then
    runuser -u munge -- munged
fi

if ! scontrol ping >/dev/null 2>&1; then
    slurmctld
elif [ "$changed" = yes ]; then
    scontrol reconfigure
fi
if [ ! -f /run/slurmd.pid ] || ! kill -0 "$(cat /run/slurmd.pid)" 2>/dev/null; then
    slurmd
fi

for _ in $(seq 60); do
    state=$(sinfo --noheader --nodes="$host" --format=%t 2>/dev/null || true)
    case "$state" in
        idle*|mix*|alloc*) echo "one-node.sh: $host is $state ($cpus CPUs)"; exit 0 ;;
        down*|drain*) scontrol update nodename="$host" state=resume 2>/dev/null || true ;;
    esac
    sleep 1
done
echo "one-node.sh: the node did not come up; see /var/log/slurm/" >&2
exit 1
