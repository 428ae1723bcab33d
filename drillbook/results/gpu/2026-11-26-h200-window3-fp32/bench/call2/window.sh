#!/bin/bash
set -u
START=$(date +%s)
X=/tmp/w4; rm -rf $X; mkdir -p $X
export PYTHONUNBUFFERED=1 DRILLBOOK_DATA=$PWD/.gpu/data MPLBACKEND=Agg PYTHONPATH=$PWD
stamp() { echo "[t=$(( $(date +%s) - START )) s] $*" | tee -a $X/timeline.txt; }
finish() { tar -czf $OUT/w4.tar.gz -C /tmp w4; }
trap finish EXIT
{ nvidia-smi; python3 -c "import torch,sys;print(sys.version);print(torch.__version__, torch.version.cuda, torch.cuda.get_device_name())"
  python3 -c "from drillbook.provenance import git_state; print(git_state())"; nproc; } > $X/env.txt 2>&1
stamp "start"
timeout 60 python3 -m pytest tests/test_loop.py tests/test_vmf.py tests/test_sync.py -m cuda -q -p no:cacheprovider -rs > $X/cuda-tests.txt 2>&1; stamp "cuda tests rc=$?"
timeout 100 python3 -m drillbook.cli bench targets --device cuda --out $X/targets.json > $X/targets.log 2>&1; stamp "bench targets rc=$?"
timeout 90 python3 tools/authors_step.py --authors .gpu/awd --device cuda --out $X/authors-step-fp32.json > $X/authors-step-fp32.log 2>&1; stamp "authors-step fp32 rc=$?"
timeout 70 python3 tools/speed_goals.py --device cuda --models drill-4 --batches 150 --set train.amp=tf32 --out $X/speed-goals-drill-tf32.json > $X/speed-drill.log 2>&1; stamp "drill tf32 rc=$?"
timeout 70 python3 tools/speed_goals.py --device cuda --models drill-4 --batches 150 --out $X/speed-goals-drill-fp32.json >> $X/speed-drill.log 2>&1; stamp "drill fp32 rc=$?"
LEFT=$(( ${WINDOW:-400} - ($(date +%s) - START) - 10 ))
stamp "compiled sweep with ${LEFT} s left"
[ $LEFT -gt 40 ] && timeout $LEFT python3 -m drillbook.cli bench sweep --vocab-sizes 50000 --compile --device cuda --out $X/sweep-compiled.json > $X/sweep-compiled.log 2>&1; stamp "compiled sweep rc=$?"
