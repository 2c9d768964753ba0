#!/bin/bash
# Grade a class on Slurm: an array of N shards (grade.sbatch), then the
# merge (merge.sbatch) once every shard has ended (docs/cluster.md).
#
#   export GRADER_SEED=...          # the secret seed, in this shell only
#   CLASS=/shared/course/hw3/submitted WORK=/shared/course/hw3/grading \
#   ASSIGNMENT=multi_head_attention SHARDS=8 \
#   PYTHON=/shared/course/venv/bin/python cluster/slurm/submit.sh
#
# ARRAY=3,5 submits those shards again (then the merge); other arguments
# go to both sbatch calls (e.g. --partition=teaching, --hold).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
: "${CLASS:?the class folder}" "${WORK:?the folder for parts, logs, grades.csv}"
: "${ASSIGNMENT:?the assignment id}" "${SHARDS:?N, the number of shards}"
: "${GRADER_SEED:?export GRADER_SEED (the secret seed) in this shell first}"
export CLASS WORK ASSIGNMENT SHARDS PYTHON="${PYTHON:-python3}" GRADER_SEED
# Slurm opens logs/... before the job starts and does not create folders.
mkdir -p "$WORK/logs" "$WORK/parts"
cd "$WORK"
array=$(sbatch --parsable --array="${ARRAY:-1-$SHARDS}" "$@" \
    "$here/grade.sbatch")
merge=$(sbatch --parsable --dependency="afterany:${array%%;*}" "$@" \
    "$here/merge.sbatch")
echo "shards: job ${array%%;*} (array ${ARRAY:-1-$SHARDS} of $SHARDS); merge: job ${merge%%;*}"
echo "  logs in $WORK/logs, grades in $WORK/grades.csv"
