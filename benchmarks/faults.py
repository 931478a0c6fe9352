"""Fault injection into real runs of `sgdscale train` (local and --emulate) and `sgdscale validate`.

Every fault is drawn at random from a recorded seed and injected into a real run of the CLI:
- a worker or a parameter-server rank SIGKILLed from outside at a random iteration (the launcher's
  progress counters say when), or failing through the runtime's own hook (`worker.maybe_fault`:
  os._exit or an exception) at a random iteration;
- SIGINT or SIGTERM to the launcher during startup, the run or teardown;
- the launcher (the owner of the emulated cluster) SIGKILLed at a random moment;
- a validation grid interrupted mid-case (SIGINT, SIGTERM or SIGKILL), then resumed.

After each fault it counts what is left that this run created, and only that (other runs may
share the machine): network namespaces, links and cgroups named after the owner's pid (the
testbed's scheme `sgs<pid><letter>...`, runtime/testbed.py), processes carrying this fault's tag in
their environment, entries in the run's private TMPDIR (launcher run directories), and half-written
or unreadable output files; and whether the user got a non-zero exit with exactly one message
(`error: ...`, `interrupted`, `terminated ...`) and no traceback. A validation fault also counts
cases lost: finished before the fault but missing after it, or missing after the resume.

    nice -n 19 env PYTHONPATH=src .venv/bin/python benchmarks/faults.py            # ~60 faults, ~15-25 min
    nice -n 19 env PYTHONPATH=src .venv/bin/python benchmarks/faults.py --faults 8 --seed 3 --out /tmp/f

Raw records: benchmarks/results/faults.json; summary: benchmarks/results/faults.md.
Needs root (emulated cluster) and torch.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from sgdscale.runtime.testbed import owned_by

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"
TAG_ENV = "SGDSCALE_FAULT_TAG"
CLI = [sys.executable, "-c", "import sys; sys.argv[0] = 'sgdscale'; from sgdscale.cli import main; sys.exit(main())"]
MESSAGE_RE = re.compile(r"^(error:|interrupted|terminated)")
CHILD_ENV: dict[str, str] = {}  # --src: run another version of the code under test
EXIT_TIMEOUT_S = 150.0  # a run that has not exited this long after its fault counts as hung
SETTLE_S = 10.0  # leaks are counted until none is left or this long after the exit

# A small run: the zoo's mlp at width 512, depth 2, batch 16, 25 measured iterations (a few seconds).
ITERATIONS, WARMUP = 25, 2
TRAIN = ["mlp", "--iterations", str(ITERATIONS), "--warmup", str(WARMUP), "--batch-size", "16",
         "--option", "width=512", "--option", "depth=2", "--timeout", "120s"]
# A validation grid of three cases (one per strategy), short runs; profile and network cached.
VALIDATE = ["validate", "--models", "mlp", "--workers", "2", "--strategies", "allreduce,ps-sync,ps-async",
            "--bandwidth", "1Gbit", "--cpu-per-node", "0.5", "--iterations", "5", "--warmup", "1", "--repeats", "1"]

# How many faults of each kind a full run injects (60 in all).
PLAN = {"kill-worker": 10, "kill-server": 6, "hook": 6, "sigint": 10, "sigterm": 10, "kill-owner": 10,
        "validate": 8}


# ------------------------------------------------------------------------------------------ leaks
def leaks(owner: int, tag: str, work: Path) -> dict[str, list[str]]:
    """Everything this run left: only objects named after its owner pid or tagged with its tag."""
    found: dict[str, list[str]] = dict(owned_by(owner))  # netns, links (veths, bridge), cgroups
    processes, zombies = [], []
    marker = f"{TAG_ENV}={tag}".encode()
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            if marker not in (proc / "environ").read_bytes().split(b"\0"):
                continue
            stat = (proc / "stat").read_text()
        except OSError:
            continue
        state = stat.rsplit(")", 1)[1].split()[0]
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            cmdline = ""
        entry = f"{proc.name} {cmdline[:120]}"
        (zombies if state == "Z" else processes).append(entry)
    found["processes"], found["zombies"] = processes, zombies
    # torch keeps its compile cache in TMPDIR/torchinductor_<user> on purpose: not a run's leftover
    found["tmp"] = sorted(p.name for p in (work / "tmp").iterdir()
                          if not p.name.startswith("torchinductor_")) if (work / "tmp").exists() else []
    found["half_written"] = half_written(work / "out")
    return found


def half_written(out: Path) -> list[str]:
    """Temporary files of an atomic write, and JSON files that do not parse."""
    bad = []
    for path in sorted(out.rglob("*")) if out.exists() else []:
        if path.is_file() and path.name.startswith(".") and path.name.endswith(".tmp"):
            bad.append(str(path.relative_to(out)))
        elif path.is_file() and path.suffix == ".json":
            try:
                json.loads(path.read_text())
            except (OSError, ValueError):
                bad.append(str(path.relative_to(out)))
    return bad


def settle(owner: int, tag: str, work: Path) -> tuple[dict[str, list[str]], float]:
    """Leaks once nothing changes any more (reapers work asynchronously): (leaks, seconds waited)."""
    start = time.monotonic()
    while True:
        found = leaks(owner, tag, work)
        if not any(found.values()) or time.monotonic() - start > SETTLE_S:
            return found, time.monotonic() - start
        time.sleep(0.1)


# ------------------------------------------------------------------------------------------ a run
class Run:
    """One CLI process with a private TMPDIR and a tag every descendant inherits."""

    def __init__(self, argv: list[str], work: Path, tag: str) -> None:
        self.work, self.tag = work, tag
        (work / "tmp").mkdir(parents=True, exist_ok=True)
        (work / "out").mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "TMPDIR": str(work / "tmp"), TAG_ENV: tag, **CHILD_ENV}
        self.stderr_path = work / "stderr.txt"
        self.started = time.monotonic()
        self.most_progress = 0  # the furthest any worker was seen, to tell teardown from startup
        with open(work / "stdout.txt", "wb") as out, open(self.stderr_path, "wb") as err:
            self.proc = subprocess.Popen(argv, env=env, stdout=out, stderr=err, stdin=subprocess.DEVNULL)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def run_dir(self) -> Path | None:
        dirs = sorted((self.work / "tmp").glob("sgdscale-run-*"))
        return dirs[0] if dirs else None

    def progress(self) -> dict[int, int]:
        """Iterations done per rank (the launcher's 8-byte counters), {} before the ranks start."""
        run_dir = self.run_dir()
        done = {}
        for path in run_dir.glob("progress-*") if run_dir else []:
            try:
                data = path.read_bytes()
            except OSError:
                continue
            if len(data) == 8:
                done[int(path.name.split("-")[1])] = int.from_bytes(data, sys.byteorder, signed=True)
        return done

    def phase(self, workers: int) -> str:
        if not self.alive():
            return "exited"
        done = self.progress()
        steps = [done.get(rank, 0) for rank in range(workers)]
        self.most_progress = max([self.most_progress, *steps])
        if not done and self.most_progress > 0:
            return "teardown"  # the launcher has removed its run directory: the ranks are done
        if not done or max(steps) == 0:
            return "startup"
        return "teardown" if min(steps) >= ITERATIONS + WARMUP else "run"

    def wait_for(self, condition, timeout_s: float = 120.0) -> bool:
        """Poll `condition()` until true (True) or the process exits or time runs out (False)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if condition():
                return True
            if not self.alive():
                return False
            time.sleep(0.01)
        return False

    def rank_pid(self, rank: int) -> int | None:
        run_dir = self.run_dir()
        if run_dir is None:
            return None
        for proc in Path("/proc").glob("[0-9]*"):
            try:
                argv = (proc / "cmdline").read_bytes().decode(errors="replace").split("\0")
            except OSError:
                continue
            if "sgdscale.runtime.rank" in argv and str(run_dir) in argv and \
                    argv[argv.index("--rank") + 1] == str(rank):
                return int(proc.name)
        return None

    def finish(self) -> dict[str, Any]:
        """Wait for the exit (SIGKILL past EXIT_TIMEOUT_S: a hang), then judge what the user saw."""
        hung = False
        try:
            self.proc.wait(timeout=EXIT_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            hung = True
            self.proc.kill()
            self.proc.wait()
        text = self.stderr_path.read_text(errors="replace")
        lines = [line for line in text.splitlines() if line.strip()]
        stdout = (self.work / "stdout.txt").read_text(errors="replace")
        return {
            "returncode": self.proc.returncode,
            # the command's last line (train: "throughput ..."/"measurement written", validate: "results: ...")
            "finished": bool(re.search(r"^(measurement written to|results: )", stdout, re.MULTILINE)),
            "wall_s": round(time.monotonic() - self.started, 2),
            "hung": hung,
            "messages": [line for line in lines if MESSAGE_RE.match(line)][:5],
            "traceback": any(line.startswith("Traceback") for line in lines),
            "warnings": [line for line in lines if line.startswith("warning:")][:5],
        }


def judge(record: dict[str, Any], owner_killed: bool) -> str:
    """completed (exit 0; or the signal came after the command had finished its work and written
    its last line, while the interpreter was exiting, when Python has put the default handlers
    back), clean (non-zero, one message, no traceback), killed (the owner itself was SIGKILLed: it
    cannot speak), or bad."""
    if record["hung"] or record["traceback"]:
        return "bad"
    if owner_killed and record["returncode"] == -signal.SIGKILL:
        return "killed"
    if record["returncode"] == 0 or (record["finished"] and record["returncode"] in (-signal.SIGINT, -signal.SIGTERM)):
        return "completed" if not record["messages"] else "bad"
    return "clean" if len(record["messages"]) == 1 else "bad"


# ------------------------------------------------------------------------------------------ faults
def train_argv(rng: random.Random, *, strategies=("allreduce", "ps-sync", "ps-async")) -> tuple[list[str], dict]:
    emulate = rng.random() < 0.5
    strategy = rng.choice(strategies)
    workers = rng.choice([2, 3])
    args = ["train", *TRAIN, "--workers", str(workers), "--strategy", strategy]
    if emulate:
        args += ["--emulate", "--bandwidth", "1Gbit"]
    out = "measurement.json"
    return args, {"emulate": emulate, "strategy": strategy, "workers": workers, "output": out}


def output_consistent(work: Path, setup: dict, record: dict[str, Any]) -> bool:
    """The measurement exists exactly when the run finished its work (an owner SIGKILLed after
    writing it, before saying so, may leave it: whole, which `half_written` checks)."""
    exists = (work / "out" / setup["output"]).exists()
    if record["returncode"] == -signal.SIGKILL:
        return not exists or record["phase"] == "teardown"
    return exists == (record["returncode"] == 0 or record["finished"])


def fault_train(kind: str, rng: random.Random, work: Path, tag: str) -> dict[str, Any]:
    strategies = ("ps-sync", "ps-async") if kind == "kill-server" else ("allreduce", "ps-sync", "ps-async")
    args, setup = train_argv(rng, strategies=strategies)
    args += ["-o", str(work / "out" / setup["output"])]
    workers = setup["workers"]
    total = ITERATIONS + WARMUP
    detail: dict[str, Any] = {}
    argv = list(CLI)
    if kind == "hook":
        hook = {"rank": rng.randrange(workers), "iteration": rng.randrange(1, total - 1),
                "kind": rng.choice(["exit", "raise"])}
        argv = [sys.executable, str(Path(__file__).resolve()), "--hook", json.dumps(hook), "--"]
        detail["hook"] = hook
    run = Run(argv + args, work, tag)
    owner = run.proc.pid
    injected, phase = True, None
    if kind in ("kill-worker", "kill-server"):
        rank = rng.randrange(workers) if kind == "kill-worker" else workers  # the first shard
        at = rng.randrange(1, total - 1)
        detail.update(rank=rank, at_iteration=at)
        reached = run.wait_for(lambda: run.phase(workers) == "run" and
                               min(run.progress().get(r, 0) for r in range(workers)) >= at)
        pid = run.rank_pid(rank) if reached else None
        injected = pid is not None
        if injected:
            detail["progress"] = run.progress()
            phase = run.phase(workers)
            os.kill(pid, signal.SIGKILL)
    elif kind in ("sigint", "sigterm", "kill-owner"):
        sig = {"sigint": signal.SIGINT, "sigterm": signal.SIGTERM, "kill-owner": signal.SIGKILL}[kind]
        moment = rng.choice(["startup", "run", "teardown"])
        detail["aimed_at"] = moment
        if moment == "startup":
            delay = rng.uniform(0.05, 3.0)
            detail["delay_s"] = round(delay, 3)
            run.wait_for(lambda: time.monotonic() - run.started >= delay)
        elif moment == "run":
            at = rng.randrange(1, total - 1)
            detail["at_iteration"] = at
            run.wait_for(lambda: run.phase(workers) != "startup" and
                         min(run.progress().get(r, 0) for r in range(workers)) >= at)
        else:
            run.wait_for(lambda: run.phase(workers) == "teardown")
            time.sleep(rng.uniform(0.0, 0.3))
        phase = run.phase(workers)
        injected = run.alive()
        if injected:
            os.kill(owner, sig)
    else:
        phase = "run"
    outcome = run.finish()
    found, waited = settle(owner, tag, work)
    outcome["output_consistent"] = output_consistent(work, setup, {**outcome, "phase": phase})
    return {**setup, **detail, "injected": injected, "phase": phase, **outcome,
            "verdict": judge(outcome, kind == "kill-owner"), "leaks": found, "settle_s": round(waited, 2)}


def _cases_done(out: Path) -> dict[str, float]:
    """Finished validation cases in results.json: key -> run_wall_s of its run (identifies the run)."""
    try:
        data = json.loads((out / "results.json").read_text())
    except (OSError, ValueError):
        return {}
    return {row["key"]: row["runs"][-1]["run_wall_s"] for row in data.get("cases", [])}


def fault_validate(rng: random.Random, work: Path, tag: str, template: Path, cases: int) -> dict[str, Any]:
    out = work / "out"
    out.mkdir(parents=True, exist_ok=True)
    for cached in ("profiles", "networks"):
        shutil.copytree(template / cached, out / cached)
    args = [*VALIDATE, "-o", str(out)]
    sig = rng.choice([signal.SIGINT, signal.SIGTERM, signal.SIGKILL])
    finished = rng.randrange(cases)  # cases to let finish before the fault
    run = Run(CLI + args, work, tag)
    owner = run.proc.pid
    run.wait_for(lambda: len(_cases_done(out)) >= finished, timeout_s=300)
    delay = rng.uniform(0.5, 4.0)  # into the next case (a case takes ~5-10 s here)
    run.wait_for(lambda: False, timeout_s=delay)
    before = _cases_done(out)
    injected = run.alive()
    if injected:
        os.kill(owner, sig)
    outcome = run.finish()
    after_fault = _cases_done(out)
    found, waited = settle(owner, tag, work)
    # Resume: the same command, no fault.
    shutil.rmtree(work / "tmp", ignore_errors=True)
    resume = Run(CLI + args, work, f"{tag}-resume")
    resume_outcome = resume.finish()
    after_resume = _cases_done(out)
    resume_found, resume_waited = settle(resume.proc.pid, f"{tag}-resume", work)
    lost = sorted(set(before) - set(after_fault)) + sorted(f"{key} (after resume)" for key in
                                                           set(before) | set(after_fault) if key not in after_resume)
    redone = sorted(key for key, wall in after_fault.items() if after_resume.get(key) != wall)
    return {
        "signal": signal.Signals(sig).name, "cases_finished_before": len(before), "delay_s": round(delay, 2),
        "injected": injected, "phase": f"case {len(before) + 1} of {cases}" if injected else "exited",
        **outcome, "verdict": judge(outcome, sig == signal.SIGKILL), "leaks": found, "settle_s": round(waited, 2),
        "cases_after_fault": len(after_fault), "lost_cases": lost, "redone_cases": redone,
        "resume": {**resume_outcome, "cases": len(after_resume), "leaks": resume_found,
                   "settle_s": round(resume_waited, 2)},
    }


def make_template(base: Path) -> tuple[Path, int, float]:
    """Run the validation grid once, whole: its profile and network file seed every validation
    fault (so each trial runs cases only), and it shows the grid completes without a fault."""
    work = base / "validate-template"
    run = Run(CLI + [*VALIDATE, "-o", str(work / "out")], work, "template")
    outcome = run.finish()
    if outcome["returncode"] != 0:
        sys.exit(f"the validation grid failed without a fault:\n{run.stderr_path.read_text()[-3000:]}")
    return work / "out", len(_cases_done(work / "out")), outcome["wall_s"]


# ------------------------------------------------------------------------------------------ report
LEAK_KINDS = ("netns", "links", "cgroups", "processes", "zombies", "tmp", "half_written")


def summarize(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for kind in [*PLAN, "all"]:
        mine = [r for r in records if (kind == "all" or r["kind"] == kind) and r["injected"]]
        if not mine:
            continue
        row = {"kind": kind, "injected": len(mine)}
        for verdict in ("clean", "completed", "killed", "bad"):
            row[verdict] = sum(r["verdict"] == verdict for r in mine)
        for leak in LEAK_KINDS:
            row[leak] = sum(len(r["leaks"][leak]) for r in mine) + sum(
                len(r["resume"]["leaks"][leak]) for r in mine if "resume" in r)
        row["output_inconsistent"] = sum(not r.get("output_consistent", True) for r in mine)
        row["lost_cases"] = sum(len(r.get("lost_cases", [])) for r in mine)
        row["settle_s_max"] = max(r["settle_s"] for r in mine)
        row["phases"] = {p: sum(r["phase"] == p for r in mine) for p in sorted({r["phase"] for r in mine})}
        rows.append(row)
    return rows


def markdown(meta: dict[str, Any], rows: list[dict[str, Any]], records: list[dict[str, Any]]) -> str:
    lines = [
        "# Faults injected into real runs",
        "",
        f"`{meta['command']}`, {meta['date']}, {meta['machine']}; "
        f"{meta['injected']} faults injected ({meta['drawn']} drawn; a fault whose run had already exited "
        f"is not counted), {meta['wall_s'] / 60:.1f} min, load average {meta['load_before']} before, "
        f"{meta['load_after']} after.",
        "",
        "Verdicts: clean = non-zero exit, exactly one message, no traceback; completed = the fault came "
        "too late to matter and the run succeeded with its output whole; killed = the owner itself was "
        "SIGKILLed (it cannot print); bad = anything else (a traceback, a hang, no or several messages).",
        "Leaks are counted after the exit, waiting up to 10 s for reapers (settle, max shown).",
        "",
        "| fault | injected | clean | completed | killed | bad | netns | links | cgroups | processes | "
        "zombies | tmp dirs | half-written | output vs exit | lost cases | settle max |",
        "|---|" + "---:|" * 15,
    ]
    for row in rows:
        lines.append(f"| {row['kind']} | {row['injected']} | {row['clean']} | {row['completed']} | {row['killed']} | "
                     f"{row['bad']} | " + " | ".join(str(row[k]) for k in LEAK_KINDS)
                     + f" | {row['output_inconsistent']} | {row['lost_cases']} | {row['settle_s_max']:.1f} s |")
    lines += ["", "Phases hit: " + "; ".join(f"{row['kind']}: " + ", ".join(f"{p} {n}" for p, n in row["phases"].items())
                                            for row in rows if row["kind"] != "all"), ""]
    validations = [r for r in records if r["kind"] == "validate" and r["injected"]]
    if validations:
        lines += ["Validation faults (grid of "
                  f"{meta['validate_cases']} cases, each resumed with the same command):", "",
                  "| # | signal | finished before | after fault | after resume | lost | redone | resume exit |",
                  "|---:|---|---:|---:|---:|---:|---:|---:|"]
        for r in validations:
            lines.append(f"| {r['index']} | {r['signal']} | {r['cases_finished_before']} | {r['cases_after_fault']} | "
                         f"{r['resume']['cases']} | {len(r['lost_cases'])} | {len(r['redone_cases'])} | "
                         f"{r['resume']['returncode']} |")
        lines.append("")
    bad = [r for r in records if r["injected"] and (r["verdict"] == "bad" or any(r["leaks"][k] for k in LEAK_KINDS))]
    lines.append(f"Faults with a bad verdict or a leak: {len(bad)}" + ("" if not bad else ""))
    for r in bad:
        lines.append(f"- #{r['index']} {r['kind']} ({r['phase']}): exit {r['returncode']}, messages "
                     f"{r['messages']}, leaks { {k: v for k, v in r['leaks'].items() if v} }")
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------------------ main
def run_hooked(hook: dict[str, Any], argv: list[str]) -> int:
    """`sgdscale ARGV` with the runtime's fault hook set (what tests do through TrainConfig.fault)."""
    import sgdscale.runtime.train as train
    from sgdscale.cli import main as cli_main

    checked = train.validate

    def validate_with_fault(config):
        config = checked(config)
        config.fault = hook
        return config

    train.validate = validate_with_fault
    return cli_main(argv)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seed", type=int, default=None, help="default: drawn and recorded")
    parser.add_argument("--faults", type=int, default=sum(PLAN.values()), help="how many to draw (the plan's mix)")
    parser.add_argument("--kinds", default=",".join(PLAN), help="only these kinds")
    parser.add_argument("--out", type=Path, default=RESULTS, help="folder for faults.json and faults.md")
    parser.add_argument("--work", type=Path, default=Path("/tmp/sgdscale-faults"), help="scratch folder")
    parser.add_argument("--src", type=Path, default=None,
                        help="run the sgdscale package under this folder (e.g. another checkout's src) instead")
    parser.add_argument("--hook", help=argparse.SUPPRESS)
    parser.add_argument("rest", nargs="*", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.hook:
        sys.exit(run_hooked(json.loads(args.hook), args.rest))
    if os.geteuid() != 0:
        sys.exit("needs root (the emulated cluster)")
    signal.signal(signal.SIGINT, signal.default_int_handler)  # children start with default handlers
    if args.src is not None:
        CHILD_ENV["PYTHONPATH"] = str(args.src.resolve())
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 31)
    rng = random.Random(seed)
    kinds = [k for k in args.kinds.split(",") if k]
    plan = [kind for kind in PLAN if kind in kinds for _ in range(PLAN[kind])]
    scale = args.faults / len(plan)
    drawn = [kind for kind in PLAN if kind in kinds for _ in range(max(1, round(PLAN[kind] * scale)))]
    rng.shuffle(drawn)
    base = args.work / f"seed{seed}"
    shutil.rmtree(base, ignore_errors=True)
    base.mkdir(parents=True)
    started = time.time()
    load_before = os.getloadavg()
    template, cases, template_s = (make_template(base) if "validate" in drawn else (None, 0, 0.0))
    records = []
    for index, kind in enumerate(drawn):
        work = base / f"{index:03d}-{kind}"
        tag = f"faults-{seed}-{index}"
        if kind == "validate":
            record = fault_validate(rng, work, tag, template, cases)
        else:
            record = fault_train(kind, rng, work, tag)
        record = {"index": index, "kind": kind, **record}
        records.append(record)
        leaked = {k: len(v) for k, v in record["leaks"].items() if v}
        print(f"[{index + 1}/{len(drawn)}] {kind:12s} {record['phase'] or '-':10s} injected={record['injected']!s:5s} "
              f"exit={record['returncode']} {record['verdict']:9s} leaks={leaked or 0} "
              f"{'lost=' + str(len(record['lost_cases'])) if kind == 'validate' else ''} "
              f"{record['messages'][:1]}", flush=True)
    meta = {
        "command": "nice -n 19 env PYTHONPATH=src .venv/bin/python benchmarks/faults.py"
                   + f" --seed {seed}" + (f" --src {args.src}" if args.src else "")
                   + (f" --faults {args.faults}" if args.faults != sum(PLAN.values()) else "")
                   + (f" --kinds {args.kinds}" if args.kinds != ",".join(PLAN) else ""),
        "seed": seed, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(started)),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, {platform.system()} {platform.release()}",
        "wall_s": time.time() - started, "drawn": len(drawn), "injected": sum(r["injected"] for r in records),
        "load_before": [round(x, 2) for x in load_before], "load_after": [round(x, 2) for x in os.getloadavg()],
        "validate_cases": cases, "validate_template_s": template_s,
        "settings": {"train": TRAIN, "validate": VALIDATE, "plan": PLAN},
    }
    rows = summarize(records)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "faults.json").write_text(json.dumps({"meta": meta, "summary": rows, "faults": records}, indent=1) + "\n")
    (args.out / "faults.md").write_text(markdown(meta, rows, records))
    print(markdown(meta, rows, records))
    shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
