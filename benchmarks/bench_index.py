"""The indexed NCC search against the pruned passes: the duplicates layer (or the search alone)
on generated releases of growing size, Kermany and the demo, with the growth exponent.

Sets (``--sets``):

``release-N``  the generated release of ``bench_release_scale.py`` with N files (smooth random
               grey images of 64²/96²/128², 80/20 split, 0.5% byte copies and 0.5% re-encodes
               in test), written once under ``--cache``;
``kermany``    ``kermany-chest-xray-224`` in ``../shared/data`` (or ``$SPLITSCOPE_SHARED_DATA``),
               5,840 files;
``demo``       the demo release (``splitscope.datasets.demo.make_demo``, 320 files).

Each set is scanned once into its own workspace under ``--cache`` (the timed runs find every
file there). Arms, each in a fresh interpreter, alternating A B A B … (the order reversed every
other repeat):

``indexed``    this tree (its default search: the cluster index over the projected
               references, :mod:`splitscope.relations.ncc_index`);
``pruned``     this tree with the index turned off at every size: the pruned search's two
               passes over every query × reference bound (what ``search='pruned'`` was), with
               this tree's forms of the bound;
``baseline``   with ``--baseline-src DIR``: another tree (e.g. the code before the index) with
               its default search.

What is timed (``--what``): ``layer``: ``audit --layers duplicates --workers W`` on the scanned
workspace; the layer's own seconds (``duration_s`` of audit.json) and the process's wall;
``search``: ``ncc_search`` of the test rows' thumbnails against the training rows' (τ 0.98,
``workers`` W) alone. Outputs are compared between arms: the layer's query flags (best ρ,
nearest counterpart, every rule's flag) and pair table, or the search's best index, best ρ and
pairs, must be identical; on the generated releases every planted copy must be the nearest NCC
counterpart of its test file. The report gives medians, the ratio of each arm to ``indexed``
and, between the two largest releases, the growth exponent ``e = log(t_big/t_small) /
log(N_big/N_small)``.

Usage::

    nice python benchmarks/bench_index.py --sets release-25000,release-100000,kermany,demo \\
        --repeats 3 --json bench-index.json
    nice python benchmarks/bench_index.py --what search --sets release-25000 --repeats 5
    nice python benchmarks/bench_index.py --baseline-src ../main/src --sets release-25000
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_output import emit

HERE = Path(__file__).resolve()
ROOT = HERE.parents[1]
SHARED_DATA = Path(os.environ.get("SPLITSCOPE_SHARED_DATA", ROOT.parent / "shared" / "data"))
DEFAULT_KERMANY = SHARED_DATA / "kermany-chest-xray-224"
DEFAULT_CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "splitscope-bench"
GROUP_REGEX = r"p(?P<group>\d+)_"

# the child: one timed run of one arm, printing one JSON line (its work under the main guard:
# the scan's worker processes start from a fork server that imports the main module)
CHILD = r"""
import hashlib, json, sys, tempfile, time
from pathlib import Path
import numpy as np


def digest(*arrays):
    h = hashlib.sha256()
    for a in arrays:
        a = np.ascontiguousarray(a)
        h.update(str(a.dtype).encode() + str(a.shape).encode())
        h.update(a.tobytes())
    return h.hexdigest()[:16]


def layer(root, workspace, workers, regex):
    import pandas as pd
    from splitscope.core.options import AuditOptions
    from splitscope.core.run import audit
    opts = AuditOptions.from_flags(workspace=Path(workspace), workers=workers, progress=False,
                                   layers="duplicates", group_regex=regex or None)
    with tempfile.TemporaryDirectory(prefix="bench-index-") as tmp:
        t = time.perf_counter()
        res = audit(root, opts, out_dir=Path(tmp) / "out")
        wall = time.perf_counter() - t
        lists = Path(tmp) / "out" / "lists"
        flags = pd.read_parquet(lists / "query_flags.parquet")
        pairs = pd.read_parquet(lists / "pairs.parquet")
        manifest = pd.read_csv(lists / "manifest.csv", usecols=["row", "path"])
    done = next(x for x in res.document["layers"] if x["layer"] == "duplicates")
    cols = [c for c in flags.columns if c.startswith(("ncc", "hash", "sha256", "flat"))]
    flags = flags.sort_values(["boundary", "row"], kind="stable")
    pairs = pairs.sort_values(list(pairs.columns[:2]), kind="stable")
    notes = [(r.get("details") or {}).get("notes") for r in res.document["records"]]
    search = next((n["ncc_search"] for n in notes if isinstance(n, dict)
                   and "ncc_search" in n), None)
    nearest = flags[["path", "ncc_nearest_counterpart"]].merge(
        manifest.rename(columns={"row": "ncc_nearest_counterpart", "path": "counterpart"}),
        on="ncc_nearest_counterpart", how="left")
    return {"layer_s": done.get("duration_s"), "wall_s": wall, "search": search,
            "digest": digest(pd.util.hash_pandas_object(flags[["row", *cols]], index=False)
                             .to_numpy(), pd.util.hash_pandas_object(pairs, index=False)
                             .to_numpy()),
            "nearest": dict(zip(nearest["path"], nearest["counterpart"].fillna("")))}


def search(root, workspace, workers):
    from splitscope.features.scanning import scan
    from splitscope.relations.ncc import ncc_search
    s = scan(root, workspace, workers=workers, progress=False)
    rows = s.rows()
    ok = rows["thumb_index"] >= 0
    q = s.thumbs(rows[ok & (rows["split"] == "test")]["row"].to_numpy())
    r = s.thumbs(rows[ok & (rows["split"] == "train")]["row"].to_numpy())
    ncc_search(q[:2], r[:2], tau=0.98, workers=workers)  # imports and thread pools, untimed
    t = time.perf_counter()
    res = ncc_search(q, r, tau=0.98, workers=workers)
    wall = time.perf_counter() - t
    p = res.params
    return {"search_s": wall, "search": {k: p.get(k) for k in (
        "search", "cell_side", "rank", "clusters", "visited_share", "scored_pairs")},
        "digest": digest(res.best_index, res.best_rho, res.pairs["query"].to_numpy(),
                         res.pairs["reference"].to_numpy(), res.pairs["rho"].to_numpy()),
        "queries": int(len(q)), "references": int(len(r))}


if __name__ == "__main__":
    root, workspace, what, arm, workers, regex = sys.argv[1:7]
    if arm == "pruned":  # the index turned off: the pruned passes at every size
        from splitscope.relations import ncc_index
        ncc_index.INDEX_MIN_PAIRS = float("inf")
    out = (layer(root, workspace, int(workers), regex) if what == "layer"
           else search(root, workspace, int(workers)))
    print(json.dumps(out, default=str))
"""


def prepare(name: str, cache: Path, kermany: Path, workers: int) -> tuple[Path, Path, dict]:
    """The set's root, its scanned workspace (scanned once) and what was planted."""
    planted: dict = {}
    if name.startswith("release-"):
        from bench_release_scale import make_release, plan, relpath

        n = int(name.split("-", 1)[1])
        root, _ = make_release(cache, n, workers=workers)
        p = plan(n)
        planted = {relpath(p, i): relpath(p, int(p["copy_of"].iat[i]))
                   for i in np.flatnonzero(p["copy_of"].to_numpy() >= 0)}
    elif name == "kermany":
        root = kermany
    elif name == "demo":
        from splitscope.datasets.demo import make_demo

        root = cache / "bench-index-demo"
        if not (root / "planted.json").exists():
            make_demo(root)
    else:
        raise SystemExit(f"unknown set {name!r}")
    workspace = cache / "bench-index-workspaces" / name
    if not (workspace / "scan.json").exists():
        code = ("import sys\nfrom splitscope.features.scanning import scan\n"
                "if __name__ == '__main__':\n"
                "    scan(sys.argv[1], sys.argv[2], workers=int(sys.argv[3]), progress=False)")
        subprocess.run([sys.executable, "-c", code, str(root), str(workspace), str(workers)],
                       check=True, env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
    return root, workspace, planted


def run_arm(arm: str, src: Path, root: Path, workspace: Path, what: str, workers: int,
            regex: str) -> dict:
    env = {**os.environ, "PYTHONPATH": str(src)}
    with tempfile.TemporaryDirectory(prefix="bench-index-child-") as tmp:
        script = Path(tmp) / "child.py"
        script.write_text(CHILD)
        before = os.times()
        proc = subprocess.run([sys.executable, str(script), str(root), str(workspace), what,
                               arm, str(workers), regex], capture_output=True, text=True,
                              env=env, check=False)
        after = os.times()
    if proc.returncode != 0:
        raise RuntimeError(f"{arm} failed: {proc.stderr[-3000:]}")
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    out["cpu_s"] = (after.children_user - before.children_user
                    + after.children_system - before.children_system)
    return out


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sets", default="release-25000,release-100000,kermany,demo")
    ap.add_argument("--what", choices=("layer", "search"), default="layer")
    ap.add_argument("--arms", default="indexed,pruned")
    ap.add_argument("--baseline-src", type=Path, help="another tree's src/ (arm 'baseline')")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    ap.add_argument("--kermany", type=Path, default=DEFAULT_KERMANY)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    arms = args.arms.split(",") + (["baseline"] if args.baseline_src else [])
    srcs = {a: ROOT / "src" for a in arms}
    if args.baseline_src:
        srcs["baseline"] = args.baseline_src.resolve()
    args.cache.mkdir(parents=True, exist_ok=True)
    key = "layer_s" if args.what == "layer" else "search_s"
    report = {"what": args.what, "workers": args.workers, "repeats": args.repeats,
              "host": platform.node(), "cpus": os.cpu_count(),
              "date": time.strftime("%Y-%m-%d"), "sets": {}}
    for name in args.sets.split(","):
        root, workspace, planted = prepare(name, args.cache, args.kermany, args.workers)
        regex = GROUP_REGEX if name.startswith("release-") else ""
        runs: dict[str, list[dict]] = {a: [] for a in arms}
        load = [os.getloadavg()[0]]
        for rep in range(args.repeats):
            for arm in (arms if rep % 2 == 0 else arms[::-1]):
                runs[arm].append(run_arm(arm, srcs[arm], root, workspace, args.what,
                                         args.workers, regex))
            load.append(os.getloadavg()[0])
        digests = {a: sorted({r["digest"] for r in rs}) for a, rs in runs.items()}
        entry = {"load_1min": [round(x, 2) for x in load],
                 "identical_outputs": len({d for ds in digests.values() for d in ds}) == 1,
                 "digests": digests, "arms": {}}
        for arm, rs in runs.items():
            times = [r[key] for r in rs]
            entry["arms"][arm] = {
                "median_s": round(float(np.median(times)), 2),
                "all_s": [round(t, 2) for t in times],
                "cpu_s_median": round(float(np.median([r["cpu_s"] for r in rs])), 2),
                "search": rs[-1].get("search")}
            if args.what == "layer":
                entry["arms"][arm]["process_wall_s_median"] = round(
                    float(np.median([r["wall_s"] for r in rs])), 2)
        base = entry["arms"].get("indexed", {}).get("median_s")
        for arm, a in entry["arms"].items():
            if base and arm != "indexed":
                a["ratio_to_indexed"] = round(a["median_s"] / base, 2)
        if planted and args.what == "layer":
            found = runs[arms[0]][-1]["nearest"]
            entry["planted_copies"] = len(planted)
            entry["planted_nearest"] = sum(found.get(q) == r for q, r in planted.items())
        report["sets"][name] = entry
        print(f"{name}: " + ", ".join(f"{a} {v['median_s']} s" for a, v in
                                      entry["arms"].items()), file=sys.stderr)
    sizes = sorted((int(n.split("-", 1)[1]), n) for n in report["sets"]
                   if n.startswith("release-"))
    if len(sizes) >= 2:
        (n0, s0), (n1, s1) = sizes[-2], sizes[-1]
        report["growth_exponent"] = {
            arm: round(math.log(report["sets"][s1]["arms"][arm]["median_s"]
                                / report["sets"][s0]["arms"][arm]["median_s"])
                       / math.log(n1 / n0), 2)
            for arm in arms}
        report["growth_between"] = [s0, s1]
    emit(report, args.json)
    return report


if __name__ == "__main__":
    main()
