#!/bin/sh
# A throwaway single-node Slurm on localhost (Debian's slurmctld + slurmd, no
# munge: auth/none, state and logs in a scratch directory, ports 16817/16818)
# running ringpipe under srun the way a cluster would:
#   srun -n 2 --mpi=pmix ringpipe train --pp 2 ...
# then, for comparison, the salloc + mpirun way inside the same allocation.
# Needs root (slurmd runs the tasks) and `apt-get install slurm-wlm`.
#   bench/slurm_local.sh [WORKDIR]        (RINGPIPE=build/ringpipe)
# Prints what srun's ranks saw (world size, local ranks, threads) and the
# losses of both launches, and exits non-zero if srun did not give a 2-stage
# pipeline the same losses as mpirun.
set -u
rp=${RINGPIPE:-build/ringpipe}
rp=$(cd "$(dirname "$rp")" && pwd)/$(basename "$rp")
work=${1:-/tmp/ringpipe-slurm}
for b in slurmctld slurmd srun salloc; do
  command -v "$b" >/dev/null || { echo "skipped: $b not found (apt-get install slurm-wlm)"; exit 77; }
done
rm -rf "$work" && mkdir -p "$work/state" "$work/spool" "$work/out"
host=$(hostname -s)
cpus=$(nproc)
mem=$(awk '/MemTotal/ {print int($2 / 1024 * 0.8)}' /proc/meminfo)
cat >"$work/slurm.conf" <<CONF
ClusterName=ringpipe-test
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=16817
SlurmdPort=16818
AuthType=auth/none
CredType=cred/none
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$work/state
SlurmdSpoolDir=$work/spool
SlurmctldPidFile=$work/slurmctld.pid
SlurmdPidFile=$work/slurmd.pid
SlurmctldLogFile=$work/slurmctld.log
SlurmdLogFile=$work/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
ReturnToService=2
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/builtin
NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=local Nodes=$host Default=YES MaxTime=30 State=UP OverSubscribe=YES
CONF
export SLURM_CONF="$work/slurm.conf"
slurmctld -D -f "$SLURM_CONF" >"$work/slurmctld.out" 2>&1 &
ctld=$!
slurmd -D -f "$SLURM_CONF" >"$work/slurmd.out" 2>&1 &
sd=$!
cleanup() { kill "$sd" "$ctld" 2>/dev/null; wait "$sd" "$ctld" 2>/dev/null; }
trap cleanup EXIT INT TERM
up=0
for _ in $(seq 1 60); do
  if sinfo -h -o %T 2>/dev/null | grep -q idle; then up=1; break; fi
  sleep 0.5
done
if [ "$up" != 1 ]; then
  echo "FAIL: the local Slurm did not come up; logs:"
  tail -5 "$work/slurmctld.log" "$work/slurmd.log"
  exit 1
fi
echo "slurm $(sinfo -V | cut -d' ' -f2) up: $(sinfo -h -o '%P %D %c %T')"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
tiny="--layers 2 --channels 32 --heads 2 --seq 32 --batch 2 --microbatches 2 --steps 4 --eval-every 0 --sample-tokens 0 --measure-peak=0"
fails=0
# 1. srun starts the ranks itself (PMIx): no mpirun anywhere
echo "== srun -n 2 --mpi=pmix ringpipe train --pp 2"
timeout 120 srun -n 2 --mpi=pmix --overcommit "$rp" train --pp 2 $tiny --out "$work/out/srun" \
  >"$work/srun.log" 2>&1
rc=$?
grep -E "ranks|step +[0-9]+/|done:" "$work/srun.log" | head -8
[ "$rc" = 0 ] || { echo "FAIL: srun exited $rc"; tail -5 "$work/srun.log"; fails=$((fails + 1)); }
# what Slurm told each task (the variables rp_local_ranks reads)
timeout 60 srun -n 2 --mpi=pmix --overcommit sh -c \
  'echo "task $SLURM_PROCID of $SLURM_NTASKS: local $SLURM_LOCALID, tasks on the node $SLURM_TASKS_PER_NODE, cpus/task ${SLURM_CPUS_PER_TASK:-unset}, node $SLURMD_NODENAME"' \
  2>&1 | sort
# 2. the alternative: an allocation, and mpirun inside it (Open MPI reads the allocation)
echo "== salloc -n 2 mpirun ringpipe train --pp 2"
timeout 120 salloc -n 2 --overcommit mpirun --oversubscribe --bind-to none "$rp" train --pp 2 $tiny \
  --out "$work/out/mpirun" >"$work/salloc.log" 2>&1
rc=$?
grep -E "ranks|done:" "$work/salloc.log" | head -3
[ "$rc" = 0 ] || { echo "FAIL: salloc + mpirun exited $rc"; tail -5 "$work/salloc.log"; fails=$((fails + 1)); }
# both launches train the same model: the same losses step by step
a=$(grep -o '"loss":[0-9.e+-]*' "$work/out/srun/metrics.jsonl" 2>/dev/null)
b=$(grep -o '"loss":[0-9.e+-]*' "$work/out/mpirun/metrics.jsonl" 2>/dev/null)
if [ -n "$a" ] && [ "$a" = "$b" ]; then
  echo "srun and salloc+mpirun: identical losses ($(echo "$a" | tr '\n' ' '))"
else
  echo "FAIL: losses differ or are missing: srun [$a] mpirun [$b]"; fails=$((fails + 1))
fi
echo "$fails failure(s)"
[ "$fails" = 0 ]
