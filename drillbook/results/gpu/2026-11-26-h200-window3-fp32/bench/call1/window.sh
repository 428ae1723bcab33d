#!/bin/bash
# Third window: in-process against the authors' step, bench targets, speed goals fp32/tf32, compile
set -u
START=$(date +%s)
X=/tmp/w3; rm -rf $X; mkdir -p $X
export PYTHONUNBUFFERED=1 DRILLBOOK_DATA=$PWD/.gpu/data MPLBACKEND=Agg PYTHONPATH=$PWD
stamp() { echo "[t=$(( $(date +%s) - START )) s] $*" | tee -a $X/timeline.txt; }
finish() { tar -czf $OUT/w3.tar.gz -C /tmp w3; }
trap finish EXIT
{ nvidia-smi; python3 -c "import torch,sys;print(sys.version);print(torch.__version__, torch.version.cuda, torch.cuda.get_device_name())"
  python3 -c "from drillbook.provenance import git_state; print(git_state())"; nproc; } > $X/env.txt 2>&1
stamp "start"
timeout 100 python3 tools/authors_step.py --authors .gpu/awd --device cuda --out $X/authors-step-fp32.json > $X/authors-step-fp32.log 2>&1; stamp "authors-step fp32 rc=$?"
timeout 150 python3 -m drillbook.cli bench targets --device cuda --out $X/targets.json > $X/targets.log 2>&1; stamp "bench targets rc=$?"
timeout 110 python3 tools/speed_goals.py --device cuda --batches 150 --out $X/speed-goals-fp32.json > $X/speed-fp32.log 2>&1; stamp "speed goals fp32 rc=$?"
timeout 110 python3 tools/speed_goals.py --device cuda --batches 150 --set train.amp=tf32 --out $X/speed-goals-tf32.json > $X/speed-tf32.log 2>&1; stamp "speed goals tf32 rc=$?"
timeout 60 python3 -m pytest tests/test_loop.py -m cuda -q -p no:cacheprovider -rs > $X/cuda-tests.txt 2>&1; stamp "cuda tests rc=$?"
timeout 80 python3 tools/authors_step.py --authors .gpu/awd --device cuda --set train.amp=tf32 --profile 0 --out $X/authors-step-tf32.json > $X/authors-step-tf32.log 2>&1; stamp "authors-step tf32 rc=$?"
LEFT=$(( ${WINDOW:-500} - ($(date +%s) - START) - 10 ))
stamp "compile with ${LEFT} s left"
[ $LEFT -gt 40 ] && timeout $LEFT python3 tools/speed_goals.py --device cuda --models awd-lstm drill-4 --batches 150 --set train.compile=true --out $X/speed-goals-compile.json > $X/speed-compile.log 2>&1; stamp "compile rc=$?"
