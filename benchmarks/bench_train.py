"""Controlled re-training on the Kermany chest X-ray set: small-cnn, Full vs Removal vs Random ×
seeds, frozen and fine-tuned, on the CPU.

Reports, from one run of ``train_experiment``:

- training and inference images/s per policy (median over runs; training rate over the epochs
  after the first);
- data time vs compute time per epoch (share of the epoch spent assembling minibatches from
  the memory-mapped S×S array, epochs after the first; target ≤ 10%);
- frozen vs fine-tuned wall time per run (ratio of medians);
- wall time of the whole experiment (scans, duplicates, all runs);
- the effects table: paired contrasts Removal − Full and Random − Full (paired-t 95% over
  seeds) and the deduplication sensitivity official − deduplicated.

Baselines, measured side by side in the same process:

- decoding the training files again for a minibatch (Pillow open, 8-bit grey, S×S bicubic:
  what a loader without the cache does every epoch) against reading the same rows from the
  memory-mapped cache, interleaved, median of repeats;
- a plain PyTorch loop (``DataLoader`` over a uint8 tensor of the same rows, the same
  small-cnn, normalisation, flip, AdamW and cross-entropy; no checkpoint, no holdout) against
  one fine-tuning epoch of ``train_run`` on the same rows, arms alternating, median images/s
  of ``--repeats`` epochs each (``--throughput-only`` runs just this comparison).

    python benchmarks/bench_train.py --epochs 3 --json bench-train.json
    python benchmarks/bench_train.py --throughput-only --plain-rows 1024 --repeats 3
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

DEFAULT_KERMANY = Path(__file__).resolve().parents[1].parent / "shared" / "data" / \
    "kermany-chest-xray-224"


def decode_baseline(scan_s, rows: pd.DataFrame, size: int, n: int, repeats: int) -> dict:
    """Seconds per image: decode the files again vs read the cached array, interleaved."""
    from PIL import Image

    from splitscope.features.imaging import to_gray8

    pick = rows[rows["thumb_index"] >= 0].sample(n=min(n, len(rows)), random_state=0)
    files = pick["file"].tolist()
    index = pick["thumb_index"].to_numpy()
    decode, cached = [], []
    for _ in range(repeats):
        t = time.perf_counter()
        batch = np.stack([np.asarray(to_gray8(Image.open(f)).resize((size, size),
                                                                    Image.BICUBIC))
                          for f in files])
        decode.append((time.perf_counter() - t) / len(files))
        t = time.perf_counter()
        sort = np.argsort(index)
        out = np.empty_like(batch)
        out[sort] = scan_s.thumbnails[index[sort]]
        cached.append((time.perf_counter() - t) / len(files))
    d, c = statistics.median(decode), statistics.median(cached)
    return {"images": len(files), "repeats": repeats, "decode_ms_per_image": d * 1e3,
            "cached_ms_per_image": c * 1e3, "ratio_decode_over_cached": d / c,
            "max_abs_pixel_difference": int(np.abs(batch.astype(int) - out.astype(int)).max())}


def plain_loop_epoch(images: np.ndarray, labels: np.ndarray, n_classes: int, batch: int,
                     seed: int) -> float:
    """Images/s of one epoch of a plain PyTorch loop on ``images`` (uint8, (n, S, S))."""
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    from splitscope.experiments.backbones import small_cnn

    torch.manual_seed(seed)
    features, dim = small_cnn(1)
    model = torch.nn.Sequential(features, torch.nn.Linear(dim, n_classes))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=1e-4)
    data = TensorDataset(torch.from_numpy(images), torch.from_numpy(labels.astype(np.int64)))
    loader = DataLoader(data, batch_size=batch, shuffle=True,
                        generator=torch.Generator().manual_seed(seed))
    model.train()
    t = time.perf_counter()
    for x, y in loader:
        x = (x.float().unsqueeze(1) / 255.0 - 0.5) / 0.25
        flip = torch.rand(len(x)) < 0.5
        x = torch.where(flip[:, None, None, None], x.flip(-1), x)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return len(images) / (time.perf_counter() - t)


def throughput_vs_plain(scan_s, rows: pd.DataFrame, size: int, batch: int, n: int,
                        repeats: int) -> dict:
    """One fine-tuning epoch of ``train_run`` against :func:`plain_loop_epoch` on the same
    ``n`` training rows, arms alternating; medians of images/s."""
    from splitscope.experiments.backbones import resolve_backbone
    from splitscope.experiments.protocol import Protocol
    from splitscope.experiments.training import RunData, _ordered, train_run

    pick = rows[(rows["thumb_index"] >= 0) & (rows["split"] == "train")].sample(
        n=min(n, int((rows["split"] == "train").sum())), random_state=0)
    index = pick["thumb_index"].to_numpy(np.int64)
    classes = sorted(pick["label"].astype(str).unique())
    y = pick["label"].astype(str).map({c: i for i, c in enumerate(classes)}).to_numpy()
    spec = resolve_backbone("small-cnn")
    protocol = Protocol(image_size=size, epochs=1, batch_size=batch, augmentation="flip")
    tool, plain = [], []
    images = _ordered(scan_s.thumbnails, index)
    for r in range(repeats):
        with tempfile.TemporaryDirectory() as tmp:
            data = RunData(images=scan_s.thumbnails, train=index, val=index[:64],
                           y_train=y, y_val=y[:64], evaluate=index[:1],
                           n_classes=len(classes))
            res = train_run(data, spec, "finetune", protocol, r, Path(tmp))
            tool.append(res["curve"][0]["train_images_per_s"])
        plain.append(plain_loop_epoch(images, y, len(classes), batch, r))
    t, p = statistics.median(tool), statistics.median(plain)
    return {"rows": len(index), "repeats": repeats, "batch_size": batch,
            "train_run_images_per_s": t, "plain_loop_images_per_s": p,
            "ratio_train_run_over_plain": t / p, "each_train_run": tool,
            "each_plain": plain}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kermany", type=Path, default=DEFAULT_KERMANY)
    ap.add_argument("--image-size", type=int, default=64)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--pools", default="Full,Removal,Class-matched,Random")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--removal-predicate", default="hash_screen",
                    help="Predicates whose flagged training rows Removal drops (Kermany has no "
                         "copy at NCC ≥ 0.98; the hash screen gives screen-positive rows)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--decode-sample", type=int, default=512)
    ap.add_argument("--out", type=Path, default=None, help="Experiment folder (default: temp)")
    ap.add_argument("--workspace", type=Path, default=None,
                    help="Scan cache (default: inside --out)")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--plain-rows", type=int, default=1024,
                    help="Training rows of the train_run vs plain PyTorch loop comparison")
    ap.add_argument("--throughput-only", action="store_true",
                    help="Only the train_run vs plain PyTorch loop comparison")
    args = ap.parse_args()
    if not args.kermany.is_dir():
        raise SystemExit(f"Kermany set not found at {args.kermany} (--kermany PATH)")
    if args.throughput_only:
        import torch

        from splitscope.features.executors import default_workers
        from splitscope.features.scanning import scan
        torch.set_num_threads(default_workers())
        ws = args.workspace or Path(tempfile.mkdtemp(prefix="bench-train-")) / "ws"
        scan_s = scan(args.kermany, ws, thumb_size=args.image_size, workers=args.workers,
                      progress=False)
        got = throughput_vs_plain(scan_s, scan_s.rows(), args.image_size, args.batch_size,
                                  args.plain_rows, args.repeats)
        print(f"one fine-tuning epoch on {got['rows']} rows, {args.image_size}², batch "
              f"{args.batch_size}: train_run {got['train_run_images_per_s']:.1f} images/s, "
              f"plain PyTorch loop {got['plain_loop_images_per_s']:.1f} images/s: "
              f"{got['ratio_train_run_over_plain']:.2f}× (medians of {args.repeats}, arms "
              f"alternating; torch {torch.__version__}, {torch.get_num_threads()} threads)")
        if args.json:
            args.json.write_text(json.dumps(got, indent=2))
        return

    from splitscope.evaluation.effects import protocol_effects
    from splitscope.experiments.layer import contrasts_for
    from splitscope.experiments.protocol import Protocol
    from splitscope.experiments.retraining import train_experiment
    from splitscope.features.scanning import load_scan

    out = args.out or Path(tempfile.mkdtemp(prefix="bench-train-")) / "exp"
    protocol = Protocol(image_size=args.image_size, epochs=args.epochs,
                        batch_size=args.batch_size)
    t = time.perf_counter()
    res = train_experiment(args.kermany, out, seeds=tuple(int(s) for s in args.seeds.split(",")),
                           pools=tuple(args.pools.split(",")), protocol=protocol,
                           workers=args.workers, device="cpu", progress=False,
                           workspace=args.workspace,
                           removal_predicates=tuple(args.removal_predicate.split(",")),
                           echo=lambda s: print(s, flush=True))
    wall = time.perf_counter() - t

    per_run = []
    for rid in res.info["runs"]:
        rec = json.loads((out / "runs" / rid / "run.json").read_text())
        curve = pd.read_csv(out / "runs" / rid / "curve.csv")
        later = curve.iloc[1:] if len(curve) > 1 else curve
        per_run.append({"run": rid, "policy": rec["policy"], "pool": rec["pool"],
                        "seed": rec["seed"], "train_rows": rec["train_rows"],
                        "wall_s": rec["wall_s"], "updates": rec["updates"],
                        "train_images_per_s": rec["train_images_per_s"],
                        "inference_images_per_s": rec["inference_images_per_s"],
                        "data_s_per_epoch": float(later["data_s"].median()),
                        "compute_s_per_epoch": float(later["compute_s"].median()),
                        "data_share": rec["data_share"],
                        "official_ba": rec["metrics"]["official"]["balanced_accuracy"],
                        "deduplicated_ba": rec["metrics"]["deduplicated"]["balanced_accuracy"]})
    runs = pd.DataFrame(per_run)
    by_policy = runs.groupby("policy").agg(
        runs=("run", "size"), wall_s_median=("wall_s", "median"),
        train_images_per_s=("train_images_per_s", "median"),
        inference_images_per_s=("inference_images_per_s", "median"),
        data_s_per_epoch=("data_s_per_epoch", "median"),
        compute_s_per_epoch=("compute_s_per_epoch", "median"),
        data_share_max=("data_share", "max")).reset_index()
    walls = by_policy.set_index("policy")["wall_s_median"]
    ratio = float(walls["finetune"] / walls["frozen"]) if {"finetune", "frozen"} <= set(
        walls.index) else None

    table = pd.read_csv(out / "runs.csv")
    eff = protocol_effects(table[table["view"] != "training"],
                           metrics=["balanced_accuracy", "macro_auc"],
                           contrasts=contrasts_for(table), n_boot=2000, seed=0)
    paired = eff.paired[["contrast", "policy", "pool", "view", "metric", "pairs", "mean",
                         "sd", "t_low", "t_high"]]
    dedup = [{"metric": c["metric"], "runs": c["runs"], "mean": c["summary_mean"],
              "sd": c["summary_sd"], "t_low": c["interval"].get("low"),
              "t_high": c["interval"].get("high")}
             for c in eff.contrasts if c["contrast"] == "deduplication sensitivity"]

    scan_s = load_scan(res.info["workspace"], res.info["image_scan"])
    baseline = decode_baseline(scan_s, scan_s.rows(), args.image_size, args.decode_sample,
                               args.repeats)
    plain = throughput_vs_plain(scan_s, scan_s.rows(), args.image_size, args.batch_size,
                                args.plain_rows, args.repeats)

    pd.set_option("display.width", 200)
    print(f"\nKermany {args.image_size}², small-cnn, {args.epochs} epochs, batch "
          f"{args.batch_size}, seeds {args.seeds}, pools {args.pools}; wall {wall:.1f} s "
          f"(scans, duplicates, {len(runs)} runs)")
    print(f"flagged: {res.info['flagged']['train_rows']} train rows, "
          f"{res.info['flagged']['test_rows']} test rows")
    print(by_policy.to_string(index=False))
    print(f"fine-tuned / frozen wall per run (medians): {ratio:.2f}×" if ratio else "")
    print(runs[["run", "train_rows", "wall_s", "official_ba", "deduplicated_ba"]]
          .to_string(index=False))
    print("\npaired contrasts (mean ± SD over seed pairs; paired-t 95%)")
    print(paired.to_string(index=False))
    print("\ndeduplication sensitivity official − deduplicated (over every run of both "
          "policies; paired-t 95%)")
    print(pd.DataFrame(dedup).to_string(index=False))
    print(f"\nbaseline: decoding again {baseline['decode_ms_per_image']:.3f} ms/image vs cached "
          f"{baseline['cached_ms_per_image']:.4f} ms/image: "
          f"{baseline['ratio_decode_over_cached']:.0f}× (median of {args.repeats}, "
          f"{baseline['images']} images, max pixel difference "
          f"{baseline['max_abs_pixel_difference']})")
    print(f"baseline: one fine-tuning epoch on {plain['rows']} rows: train_run "
          f"{plain['train_run_images_per_s']:.1f} images/s, plain PyTorch loop "
          f"{plain['plain_loop_images_per_s']:.1f} images/s: "
          f"{plain['ratio_train_run_over_plain']:.2f}× (medians of {args.repeats})")
    if args.json:
        args.json.write_text(json.dumps({
            "params": vars(args) | {"kermany": str(args.kermany), "out": str(out),
                                    "json": str(args.json), "workspace": str(args.workspace)},
            "wall_s": wall, "by_policy": by_policy.to_dict(orient="records"),
            "finetune_over_frozen_wall": ratio, "runs": per_run,
            "paired": paired.to_dict(orient="records"), "dedup": dedup,
            "decode_baseline": baseline, "plain_loop": plain,
            "versions": res.info["versions"]}, indent=2,
            default=str))


if __name__ == "__main__":
    main()
