"""Soak test: random ``kill -9`` during ``scan`` and during ``audit``, and at each step of the
publish of an audit's output folder; rerun, compare.

For each trial the command runs in a fresh subprocess on a fresh output folder and is killed
with SIGKILL after a random delay (uniform over 5-90% of the reference run's wall time,
seeded; a run that finishes first is counted apart, another trial is added, and the window
shrinks to that run's time); the
same command is then rerun to completion on the same folder and its final outputs are
compared byte for byte with those of an uninterrupted reference run. After each kill the
script waits for the killed run's worker processes to leave; any still alive after the grace
period is an orphan (counted, then ended by its pid).

Compared outputs. ``scan``: the workspace's ``manifest.parquet`` and the assembled
``features.parquet`` and ``thumbnails.npy``. ``audit``: every file under ``lists/``, and
``audit.json`` with its run-specific fields (start and finish times, durations, host, the
workspace path, artifact hashes of the files not compared, and the scan's counts of files
extracted versus reused from the cache) set aside.

After each audit kill, and again after its rerun, the output folder is checked
(:func:`splitscope.records.publish.out_folder_problems`): its ``artifacts.json`` lists only
files present with their SHA-256, every other file is named by an interrupted publish's journal,
and while a publish is interrupted only the previous run's files are listed (never a mix).

``--publish-kills N`` kills at the publish's checkpoints rather than at random times: a finished
audit with ``--croissant`` is the previous run; a rerun without it (so ``croissant.json`` must
go) is made in a wrapper whose :func:`splitscope.records.publish.checkpoint` sends SIGKILL to
its own process at the k-th checkpoint (``SPLITSCOPE_SOAK_KILL_AT=k``; every checkpoint of a
rerun is listed first, and N of them are chosen: each kind of step, then evenly over the moves).
Each killed folder is checked as above, rerun to the end, checked again (every file but the
feature cache listed, no ``croissant.json``, no staging or publishing folder left) and compared
with an uninterrupted rerun.

With ``--pool-fits`` every provenance fit runs in joblib/loky's worker pool whatever the
release's size (as it does on a large release), so that a small, quick release still has two
pools to leave behind at each audit kill; the reference run is made the same way. Each trial
records the load average (1 min) when it starts.

    python benchmarks/soak_kill.py ../shared/data/kermany-chest-xray-224 \\
        --scan-kills 20 --audit-kills 10 --publish-kills 12 --workers 2 --json soak.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# fields of audit.json that describe the run, not its results: times, host, paths, the hashes
# of files not compared, and how much of the scan came from the cache (a resumed run reuses)
RUN_FIELDS = {"run", "duration_s", "seconds", "scan_seconds", "started", "finished",
              "timings", "workspace", "host", "artifacts", "finished_utc", "extracted",
              "reused", "repairs"}


def _children(pid: int) -> set[int]:
    """Every live descendant of ``pid`` (from /proc)."""
    parent: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            if fields[0] != "Z":
                parent[int(entry)] = int(fields[1])
    found, frontier = set(), {pid}
    while frontier:
        frontier = {p for p, pp in parent.items() if pp in frontier} - found
        found |= frontier
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


POOL_FITS = """
import sys
import splitscope.provenance.stats as stats
stats.PARALLEL_CELLS = stats.PARALLEL_CELLS_LINEAR = 1
from splitscope.cli import main
sys.exit(main(sys.argv[1:]))
"""


PUBLISH_KILL = """
import os, signal, sys
import splitscope.records.publish as publish
reached, at = [], int(os.environ.get("SPLITSCOPE_SOAK_KILL_AT", "0"))
log = os.environ.get("SPLITSCOPE_SOAK_POINTS")
def checkpoint(point):
    reached.append(point)
    if log:
        with open(log, "a", encoding="utf-8") as fh:
            fh.write(point + "\\n")
    if len(reached) == at:
        os.kill(os.getpid(), signal.SIGKILL)
publish.checkpoint = checkpoint
from splitscope.cli import main
sys.exit(main(sys.argv[1:]))
"""

CACHE = "workspace"  # the audit's feature cache inside --out: no output, never listed


def _command(verb: str, data: str, folder: Path, workers: int,
             pool_fits: bool = False) -> list[str]:
    start = [sys.executable, "-c", POOL_FITS] if pool_fits else [sys.executable, "-m",
                                                                 "splitscope.cli"]
    base = start + [verb, data, "--workers", str(workers)]
    if verb == "scan":
        return base + ["--workspace", str(folder / "ws"), "--no-progress"]
    return base + ["--out", str(folder / "out")]


def _strip(value):
    if isinstance(value, dict):
        return {k: _strip(v) for k, v in value.items() if k not in RUN_FIELDS}
    if isinstance(value, list):
        return [_strip(v) for v in value]
    return value


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def outputs(verb: str, folder: Path) -> dict[str, str]:
    """SHA-256 of each compared output file (see the module docstring)."""
    if verb == "scan":
        ws = folder / "ws"
        meta_files = list(ws.glob("features/*/meta.json"))
        if len(meta_files) != 1:
            return {"meta.json": f"{len(meta_files)} found"}
        meta = json.loads(meta_files[0].read_text())
        result = meta_files[0].parent / "results" / meta["result"]
        return {"manifest.parquet": _digest(ws / "manifest.parquet"),
                "features.parquet": _digest(result / "features.parquet"),
                "thumbnails.npy": _digest(result / "thumbnails.npy")}
    out = folder / "out"
    found = {str(p.relative_to(out)): _digest(p) for p in sorted((out / "lists").rglob("*"))
             if p.is_file()}
    doc = _strip(json.loads((out / "audit.json").read_text()))
    found["audit.json (run fields set aside)"] = hashlib.sha256(
        json.dumps(doc, sort_keys=True).encode()).hexdigest()
    return found


def folder_problems(folder: Path) -> list[str]:
    """Why the audit output folder of ``folder`` is not one consistent run (empty when it is;
    :func:`splitscope.records.publish.out_folder_problems`)."""
    from splitscope.records.publish import out_folder_problems

    out = folder / "out"
    return out_folder_problems(out, keep=[CACHE]) if out.is_dir() else []


def _listed(out: Path) -> dict[str, str]:
    doc = json.loads((out / "artifacts.json").read_text(encoding="utf-8"))
    return {e["contentUrl"]: e["sha256"] for e in doc["distribution"]}


def finished_problems(folder: Path) -> list[str]:
    """After a rerun to the end: :func:`folder_problems`, plus any file not listed in
    ``artifacts.json`` (the feature cache and the run's lock aside) and any staging or
    publishing folder left."""
    from splitscope.records.publish import LOCK_FILE, PUBLISHING_PREFIX, STAGING_PREFIX

    out = folder / "out"
    problems = folder_problems(folder)
    listed = _listed(out)
    for path in sorted(out.rglob("*")):
        rel = path.relative_to(out).as_posix()
        if rel.startswith((STAGING_PREFIX, PUBLISHING_PREFIX)) and "/" not in rel:
            problems.append(f"{rel}: left behind")
        elif path.is_file() and rel not in listed and rel not in ("artifacts.json", LOCK_FILE) \
                and not rel.startswith(CACHE + "/"):
            problems.append(f"{rel}: not listed")
    return problems


def run_once(cmd: list[str], env: dict) -> tuple[int, float]:
    started = time.monotonic()
    done = subprocess.run(cmd, env=env, check=False, stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True)
    if done.returncode not in (0, 1, 3):
        raise SystemExit(f"{' '.join(cmd)} failed ({done.returncode}): {done.stderr[-2000:]}")
    return done.returncode, time.monotonic() - started


def trial(cmd: list[str], env: dict, delay: float, grace: float, folder: Path | None = None
          ) -> dict:
    """Run ``cmd``, SIGKILL it after ``delay`` seconds, count orphans, rerun to the end; with
    ``folder`` (an audit's), check its output folder after the kill and after the rerun."""
    load = os.getloadavg()[0]
    started = time.monotonic()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    seen: set[int] = set()
    deadline = started + delay
    while time.monotonic() < deadline and proc.poll() is None:
        seen |= _children(proc.pid)
        time.sleep(0.02)
    ran = time.monotonic() - started
    killed = proc.poll() is None
    if killed:
        seen |= _children(proc.pid)
        proc.send_signal(signal.SIGKILL)
    proc.wait()
    until = time.monotonic() + grace
    while time.monotonic() < until and any(_alive(p) for p in seen):
        time.sleep(0.1)
    orphans = sorted(p for p in seen if _alive(p))
    for pid in orphans:  # end what outlived the kill, by its pid
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    after_kill = folder_problems(folder) if folder is not None else []
    run_once(cmd, env)
    after_rerun = finished_problems(folder) if folder is not None else []
    return {"delay_s": round(delay, 3), "killed": killed, "ran_s": round(ran, 3),
            "helpers_seen": len(seen), "orphans": len(orphans), "load_1min": round(load, 1),
            "problems_after_kill": after_kill, "problems_after_rerun": after_rerun}


def soak(verb: str, data: str, kills: int, workers: int, work: Path, rng: random.Random,
         env: dict, grace: float, pool_fits: bool = False) -> dict:
    reference = work / f"{verb}-reference"
    _, seconds = run_once(_command(verb, data, reference, workers, pool_fits), env)
    expected = outputs(verb, reference)
    trials, differences, i, window = [], 0, 0, seconds
    # a run that finishes before its kill is not a kill: trials go on until ``kills`` kills
    # (at most twice as many trials)
    while sum(t["killed"] for t in trials) < kills and len(trials) < 2 * kills:
        folder = work / f"{verb}-trial-{i:02d}"
        shutil.rmtree(folder, ignore_errors=True)
        t = trial(_command(verb, data, folder, workers, pool_fits), env,
                  rng.uniform(0.05, 0.9) * window, grace,
                  folder if verb == "audit" else None)
        if not t["killed"]:  # the machine got faster than the reference run: shrink the window
            window = min(window, t["ran_s"])
        got = outputs(verb, folder)
        t["differences"] = sorted(k for k in set(expected) | set(got)
                                  if expected.get(k) != got.get(k))
        differences += bool(t["differences"] or t["problems_after_kill"]
                            or t["problems_after_rerun"])
        trials.append(t)
        shutil.rmtree(folder, ignore_errors=True)
        i += 1
        done = sum(x["killed"] for x in trials)
        print(f"{verb} trial {i} (kill {done}/{kills}): kill at {t['delay_s']:.2f} s "
              f"({'killed' if t['killed'] else 'finished first'}), helpers {t['helpers_seen']}, "
              f"orphans {t['orphans']}, differing outputs {len(t['differences'])}, "
              f"folder problems {len(t['problems_after_kill'])} after the kill and "
              f"{len(t['problems_after_rerun'])} after the rerun, load {t['load_1min']}",
              flush=True)
    return {"verb": verb, "reference_seconds": round(seconds, 2), "trials": trials,
            "kills": sum(t["killed"] for t in trials),
            "kills_survived": sum(t["killed"] and not t["differences"]
                                  and not t["problems_after_kill"]
                                  and not t["problems_after_rerun"] for t in trials),
            "inconsistent_after_kill": sum(bool(t["problems_after_kill"]) for t in trials),
            "finished_before_kill": sum(not t["killed"] for t in trials),
            "orphans": sum(t["orphans"] for t in trials), "runs_with_differences": differences,
            "load_1min": [min(t["load_1min"] for t in trials),
                          max(t["load_1min"] for t in trials)],
            "compared_files": sorted(expected)}


def _publish_command(data: str, folder: Path, workers: int) -> list[str]:
    return [sys.executable, "-c", PUBLISH_KILL, *_command("audit", data, folder, workers)[3:]]


def publish_points(data: str, base: Path, workers: int, work: Path, env: dict
                   ) -> tuple[list[str], dict[str, str]]:
    """Every checkpoint a rerun without ``--croissant`` passes on a copy of ``base``, in
    order, and that rerun's compared outputs."""
    reference = work / "publish-reference"
    shutil.rmtree(reference, ignore_errors=True)
    shutil.copytree(base, reference, symlinks=True)
    log = work / "publish-points.txt"
    log.unlink(missing_ok=True)
    run_once(_publish_command(data, reference, workers), {**env, "SPLITSCOPE_SOAK_POINTS": str(log)})
    return log.read_text(encoding="utf-8").splitlines(), outputs("audit", reference)


def chosen_points(points: list[str], kills: int) -> list[int]:
    """``kills`` checkpoints (1-based): the first of each kind of step (``staged``,
    ``committed``, ``removed …``, ``moved …``, ``published`` …; evenly over the kinds when
    fewer kills than kinds), then others evenly spread."""
    kinds: dict[str, int] = {}
    for i, point in enumerate(points, 1):
        kinds.setdefault(point.split(" ")[0], i)
    firsts = sorted(kinds.values())
    if kills < len(firsts):
        return sorted({firsts[round(j * (len(firsts) - 1) / max(kills - 1, 1))]
                       for j in range(kills)})
    chosen = firsts
    rest = [i for i in range(1, len(points) + 1) if i not in chosen]
    extra = kills - len(chosen)
    if extra > 0 and rest:
        step = len(rest) / extra
        chosen += sorted({rest[min(int(j * step), len(rest) - 1)] for j in range(extra)})
    return sorted(chosen)


def publish_soak(data: str, kills: int, workers: int, work: Path, env: dict) -> dict:
    """SIGKILL at chosen checkpoints of the publish of a rerun (module docstring)."""
    base = work / "publish-base"
    shutil.rmtree(base, ignore_errors=True)
    _, seconds = run_once(_command("audit", data, base, workers) + ["--croissant"], env)
    previous = _listed(base / "out")
    points, expected = publish_points(data, base, workers, work, env)
    trials = []
    for k in chosen_points(points, kills):
        folder = work / f"publish-trial-{k:03d}"
        shutil.rmtree(folder, ignore_errors=True)
        shutil.copytree(base, folder, symlinks=True)
        done = subprocess.run(_publish_command(data, folder, workers),
                              env={**env, "SPLITSCOPE_SOAK_KILL_AT": str(k)}, check=False,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        after_kill = folder_problems(folder)
        listed = _listed(folder / "out")
        publishing = [j for j in (folder / "out").glob(".splitscope-publishing-*")
                      if (j / "artifacts.json").exists()]
        state = ("previous run" if listed == previous and not publishing else
                 "mid-publish" if publishing else "new run")
        run_once(_command("audit", data, folder, workers), env)
        after_rerun = finished_problems(folder)
        if (folder / "out" / "croissant.json").exists():
            after_rerun.append("croissant.json: left from the previous run")
        got = outputs("audit", folder)
        t = {"point": points[k - 1], "index": k, "killed": done.returncode == -signal.SIGKILL,
             "state_after_kill": state, "problems_after_kill": after_kill,
             "problems_after_rerun": after_rerun,
             "differences": sorted(x for x in set(expected) | set(got)
                                   if expected.get(x) != got.get(x))}
        trials.append(t)
        shutil.rmtree(folder, ignore_errors=True)
        print(f"publish kill {len(trials)}: at checkpoint {k}/{len(points)} ({t['point']}): "
              f"{'killed' if t['killed'] else 'NOT killed'}, left: {state}; folder problems "
              f"{len(after_kill)} after the kill and {len(after_rerun)} after the rerun, "
              f"differing outputs {len(t['differences'])}", flush=True)
    return {"verb": "publish", "reference_seconds": round(seconds, 2), "checkpoints": len(points),
            "trials": trials, "kills": sum(t["killed"] for t in trials),
            "kills_survived": sum(t["killed"] and not t["problems_after_kill"]
                                  and not t["problems_after_rerun"] and not t["differences"]
                                  for t in trials),
            "inconsistent_after_kill": sum(bool(t["problems_after_kill"]) for t in trials),
            "states_after_kill": {s: sum(t["state_after_kill"] == s for t in trials)
                                  for s in ("previous run", "mid-publish", "new run")},
            "finished_before_kill": sum(not t["killed"] for t in trials), "orphans": 0,
            "runs_with_differences": sum(bool(t["differences"] or t["problems_after_rerun"])
                                         for t in trials),
            "load_1min": [round(os.getloadavg()[0], 1)] * 2, "compared_files": sorted(expected)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("data", help="release folder (or list) to scan and audit")
    parser.add_argument("--scan-kills", type=int, default=20)
    parser.add_argument("--audit-kills", type=int, default=10)
    parser.add_argument("--publish-kills", type=int, default=0,
                        help="kills at checkpoints of an audit's publish (module docstring)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--grace", type=float, default=10.0,
                        help="seconds a killed run's workers get to leave (default 10)")
    parser.add_argument("--work", default=None, help="scratch folder (default: a temporary one)")
    parser.add_argument("--json", default=None, help="write the figures here")
    parser.add_argument("--pool-fits", action="store_true",
                        help="run every provenance fit in loky's worker pool (module docstring)")
    args = parser.parse_args()
    work = Path(args.work or tempfile.mkdtemp(prefix="splitscope-soak-"))
    work.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    rng = random.Random(args.seed)
    report = {"data": args.data, "workers": args.workers, "seed": args.seed,
              "grace_s": args.grace, "pool_fits": args.pool_fits, "results": []}
    for verb, kills in (("scan", args.scan_kills), ("audit", args.audit_kills)):
        if kills:
            report["results"].append(soak(verb, args.data, kills, args.workers, work, rng, env,
                                          args.grace, args.pool_fits))
    if args.publish_kills:
        report["results"].append(publish_soak(args.data, args.publish_kills, args.workers, work,
                                              env))
    for r in report["results"]:
        print(f"{r['verb']}: {r['kills_survived']} of {r['kills']} kills survived "
              f"({r['finished_before_kill']} runs finished before their kill), "
              f"{r['orphans']} orphaned workers, {r.get('inconsistent_after_kill', 0)} "
              f"inconsistent folders after a kill, {r['runs_with_differences']} runs with "
              f"differing outputs; reference run {r['reference_seconds']} s; compared "
              f"{len(r['compared_files'])} files; load average (1 min) "
              f"{r['load_1min'][0]}-{r['load_1min'][1]}")
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2) + "\n")
    if not args.work:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
