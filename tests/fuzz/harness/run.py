"""The fuzz targets run (make fuzz) or replayed (tests/test_fuzz.py), one at a time.

    run.py fuzz [--seconds N] [TARGET...]   each target for N seconds (default 60): prints its
                                            executions; an input that crashes it is kept in
                                            tests/fuzz/TARGET/crash-*
    run.py replay [TARGET...]               every kept crash-* input, then a short sample (the
                                            seeds, and some inputs mutated from them)

Targets: ringbuf, zchunks, wiredecode, slab (libFuzzer, ASan and UBSan: needs clang) and text
(atheris). Their seeds and corpora go to build/fuzz (FUZZ_BUILD); the C harnesses are built
once for each content of their sources, into the project's cache (harness_dir)."""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
TOP = HERE.parents[2]
KEPT = TOP / "tests" / "fuzz"  # tests/fuzz/TARGET/crash-*: every input that ever crashed one
BUILD = Path(os.environ.get("FUZZ_BUILD", TOP / "build" / "fuzz"))
PY = os.environ.get("PYTHON", str(TOP / ".venv" / "bin" / "python"))
C_TARGETS = ("ringbuf", "zchunks", "wiredecode", "slab")
TARGETS = (*C_TARGETS, "text")
# libFuzzer's longest input per target: a few 4 KiB pages, a few chunks, a capture's first
# packets, four pieces of kmem columns, a report's first lines
MAX_LEN = {"ringbuf": 20000, "zchunks": 32768, "wiredecode": 16384, "slab": 4096, "text": 8192}
# inputs mutated in a replay's sample (the text reader runs some 20 a second under atheris)
SAMPLE_RUNS = {"ringbuf": 2000, "zchunks": 2000, "wiredecode": 2000, "slab": 2000, "text": 100}

# Bugs found and not yet fixed in files this folder does not own, kept out of the way of the
# fuzzing (never of the replay, which shows them), each with the kept input that shows it:
# UBSan suppressions (none open now).
OPEN_BUG_SUPPRESSIONS = HERE / "open-bugs.supp"
# The C harnesses build() made or found in the cache: target -> its program.
HARNESS: dict[str, Path] = {}


def env(fuzzing):
    """The sanitizers' settings: UBSan's findings stop a run as ASan's do; no leak check (the
    embedded interpreter keeps its objects to the end); while fuzzing, the open bugs aside."""
    e = dict(os.environ)
    e["ASAN_OPTIONS"] = "detect_leaks=0:abort_on_error=0"
    ubsan = "halt_on_error=1:print_stacktrace=1"
    if fuzzing:
        ubsan += f":suppressions={OPEN_BUG_SUPPRESSIONS}"
    e["UBSAN_OPTIONS"] = ubsan
    e["PYTHONPATH"] = str(TOP / "analyzer")
    return e


def harness_dir():
    """Where the C harnesses of these sources are built: one folder per hash of what a build
    reads (the harnesses' C, the readers' C they compile in, the build script, the compiler and
    the Python they embed) in the project's cache (reproducers/cache-dir fuzz), so that a test
    session, `make fuzz` and the next clone of the same sources build each harness once (the
    four: 14 s of CPU, 36 s of wall at load 7), and a change of any source builds them again."""
    srcs = [*HERE.glob("*.[ch]"), HERE / "build", *(TOP / "analyzer" / "nfsreaddir").glob("_*.c")]
    srcs += (TOP / "analyzer" / "nfsreaddir" / "csrc").glob("*/*.[ch]")
    h = hashlib.sha256()
    for p in sorted(srcs):
        data = p.read_bytes()
        h.update(f"{p.relative_to(TOP)}\0{len(data)}\0".encode() + data)
    cc = subprocess.run(["clang", "--version"], capture_output=True, text=True, check=True)
    h.update(f"{cc.stdout}\0{os.path.realpath(PY)}".encode())
    cache = subprocess.run(
        [TOP / "reproducers" / "cache-dir", "fuzz"], capture_output=True, text=True, check=True
    )
    return Path(cache.stdout.rstrip("\n")) / h.hexdigest()[:24]


def build(targets):
    """The C harnesses of ``targets`` built where this build of them is not in the cache yet
    (under a lock: two runs at once build once), and the seeds made where a target has none
    yet."""
    c_targets = [t for t in targets if t in C_TARGETS]
    if c_targets:
        out = harness_dir()
        out.mkdir(parents=True, exist_ok=True)
        with open(out / ".lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            stale = [t for t in c_targets if not (out / t).exists()]
            if stale:
                # (into a folder of its own, renamed when whole: a build cut short leaves none)
                tmp = Path(tempfile.mkdtemp(prefix=".build-", dir=out))
                try:
                    subprocess.run([HERE / "build", tmp, *stale], check=True)
                    for t in stale:
                        os.replace(tmp / t, out / t)
                finally:
                    shutil.rmtree(tmp, ignore_errors=True)
        for t in c_targets:
            HARNESS[t] = out / t
    if not all((BUILD / "seeds" / t).exists() for t in targets):
        shutil.rmtree(BUILD / "seeds.tmp", ignore_errors=True)
        subprocess.run([PY, HERE / "seeds.py", BUILD / "seeds.tmp"], check=True, env=env(False))
        shutil.rmtree(BUILD / "seeds", ignore_errors=True)
        (BUILD / "seeds.tmp").rename(BUILD / "seeds")


def command(target):
    if target == "text":
        return [PY, str(HERE / "text.py")]
    return [str(HARNESS[target])]


def fuzz(target, seconds):
    """One target fuzzed for ``seconds``: (executions, crash inputs written)."""
    corpus = BUILD / "corpus" / target
    corpus.mkdir(parents=True, exist_ok=True)
    kept = KEPT / target
    kept.mkdir(parents=True, exist_ok=True)
    before = set(kept.glob("crash-*"))
    run = subprocess.run(
        [
            *command(target),
            f"-max_total_time={seconds}",
            f"-max_len={MAX_LEN[target]}",
            "-print_final_stats=1",
            f"-artifact_prefix={kept}/",
            corpus,
            BUILD / "seeds" / target,
        ],
        env=env(True),
        capture_output=True,
        text=True,
    )
    m = re.findall(r"stat::number_of_executed_units: (\d+)", run.stderr)
    new = sorted(set(kept.glob("crash-*")) - before)
    if not m and not new:
        sys.stderr.write(run.stderr[-3000:])
    return int(m[-1]) if m else 0, new, run.stderr


def replay(target, inputs, fuzzing=False, runs=0):
    """The target run on each of ``inputs`` (files or folders; ``runs`` more inputs mutated
    from them): the finished process (its return code 0 where nothing was found)."""
    return subprocess.run(
        [
            *command(target),
            f"-runs={runs}",
            "-seed=1",
            f"-max_len={MAX_LEN[target]}",
            f"-artifact_prefix={BUILD}/replay-",
            *inputs,
        ],
        env=env(fuzzing),
        capture_output=True,
        text=True,
    )


def kept_crashes(target):
    return sorted((KEPT / target).glob("crash-*"))


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("mode", choices=("fuzz", "replay"))
    ap.add_argument("--seconds", type=int, default=60)
    ap.add_argument("targets", nargs="*", metavar="TARGET", help=", ".join(TARGETS))
    a = ap.parse_intermixed_args(argv)
    a.targets = a.targets or list(TARGETS)
    if set(a.targets) - set(TARGETS):
        ap.error(f"no target {sorted(set(a.targets) - set(TARGETS))[0]}: say {', '.join(TARGETS)}")
    build(a.targets)
    failed = 0
    for t in a.targets:
        if a.mode == "fuzz":
            n, new, _ = fuzz(t, a.seconds)
            print(
                f"fuzz {t}: {n} executions in {a.seconds} s"
                + "".join(f"; CRASH kept: {p.relative_to(TOP)}" for p in new)
            )
            failed |= bool(new)
            continue
        for p in kept_crashes(t):
            r = replay(t, [p])
            print(f"replay {t} {p.name}: {'ok' if r.returncode == 0 else 'CRASHES'}")
            failed |= r.returncode != 0
        r = replay(t, [BUILD / "seeds" / t], fuzzing=True, runs=SAMPLE_RUNS[t])
        print(f"replay {t} sample: {'ok' if r.returncode == 0 else 'CRASHES'}")
        failed |= r.returncode != 0
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
