#!/usr/bin/env bash
# GPU check of controlled re-training, for a session that is lent a CUDA device:
# tv:resnet18 from a local weights file, 224², 5 seeds, fine-tuned, mixed precision and
# channels-last, on the default pools (Full, Removal, Class-matched, Random) of the Kermany set
# (Removal: the rows the hash screen flags, since Kermany has no copy at NCC ≥ 0.98).
#
# Prints the device, the protocol as recorded, per-policy training and inference images/s
# (medians over runs), wall time, and the paired contrasts of the experiment's effects.
#
#   WEIGHTS=/path/resnet18-f37072fd.pth bash benchmarks/gpu_check.sh          # on the GPU
#   DEVICE=cpu AMP=0 SIZE=32 SEEDS=0 EPOCHS=1 POOLS=Full,Removal DATA=tiny \
#       bash benchmarks/gpu_check.sh                                           # dry run
#
# WEIGHTS: a local ResNet-18 state dict (never downloaded). Without it the script writes one
# from torchvision's architecture with seeded random weights and says so: the check then
# measures speed and mechanics, not transfer from pretrained features.
# DATA: a release folder; "tiny" makes a small two-class release with planted copies.
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
SIZE=${SIZE:-224}
SEEDS=${SEEDS:-0,1,2,3,4}
EPOCHS=${EPOCHS:-3}
BATCH=${BATCH:-128}
DEVICE=${DEVICE:-cuda}
AMP=${AMP:-1}
POOLS=${POOLS:-Full,Removal,Class-matched,Random}
OUT=${OUT:-$(mktemp -d /tmp/gpu-check-XXXX)}
mkdir -p "$OUT"

if ! python -c "import torch, torchvision" 2>/dev/null; then
  python -m pip install --quiet torch==2.14.1 torchvision==0.29.1
fi
python -c "import splitscope" 2>/dev/null || python -m pip install --quiet -e ".[torch]"

DATA=${DATA:-}
if [ -z "$DATA" ]; then
  for d in shared/data/kermany-chest-xray-224 ../shared/data/kermany-chest-xray-224; do
    [ -d "$d" ] && DATA=$d && break
  done
fi
if [ "$DATA" = "tiny" ]; then
  DATA="$OUT/tiny-release"
  python -c "import sys; sys.path.insert(0, 'tests/experiments'); from pathlib import Path; \
from experiment_helpers import make_release; make_release(Path('$DATA'))"
fi
[ -d "${DATA:-}" ] || { echo "no release found: set DATA=FOLDER" >&2; exit 2; }

WEIGHTS=${WEIGHTS:-}
if [ -z "$WEIGHTS" ]; then
  WEIGHTS="$OUT/resnet18-seeded.pt"
  python -c "import torch, torchvision; torch.manual_seed(0); \
torch.save(torchvision.models.resnet18(weights=None).state_dict(), '$WEIGHTS')"
  echo "no WEIGHTS given: $WEIGHTS holds seeded random ResNet-18 weights (speed and mechanics only)"
fi

FLAGS=()
[ "$AMP" = "1" ] && FLAGS+=(--amp --channels-last)
REMOVAL=${REMOVAL:-hash_screen}
python -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, \
'device', torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'none')"
start=$(date +%s)
python -m splitscope.cli train "$DATA" --out "$OUT/exp" --backbone tv:resnet18 \
  --weights "$WEIGHTS" --image-size "$SIZE" --epochs "$EPOCHS" --batch-size "$BATCH" \
  --seeds "$SEEDS" --policy finetune --pools "$POOLS" --device "$DEVICE" \
  --removal-predicate "$REMOVAL" --workers "$(nproc)" "${FLAGS[@]}" --json > "$OUT/train.json"
end=$(date +%s)
python - "$OUT" "$((end - start))" <<'EOF'
import json
import sys
from pathlib import Path

import pandas as pd

from splitscope.evaluation.effects import protocol_effects
from splitscope.experiments.layer import contrasts_for

out, wall = Path(sys.argv[1]), int(sys.argv[2])
info = json.loads((out / "exp" / "experiment.json").read_text())
runs = pd.read_csv(out / "exp" / "runs.csv")
print(f"wall {wall} s for the scans, the duplicates layer and {len(info['runs'])} runs")
print("protocol:", json.dumps({k: info["protocol"][k] for k in
                               ("image_size", "epochs", "batch_size", "amp", "channels_last",
                                "precision", "augmentation")}))
print("backbone:", info["backbone"]["name"], info["start_weights"])
speed = runs[runs["view"] == "training"].pivot_table(index="metric", columns="policy",
                                                     values="value", aggfunc="median")
print(speed.loc[["train_images_per_s", "inference_images_per_s", "wall_seconds",
                 "data_share"]].to_string())
eff = protocol_effects(runs[runs["view"] != "training"],
                       metrics=["balanced_accuracy", "macro_auc"],
                       contrasts=contrasts_for(runs), n_boot=0)
if len(eff.paired):
    print(eff.paired[["contrast", "view", "metric", "pairs", "mean", "sd", "t_low",
                      "t_high"]].to_string(index=False))
EOF
