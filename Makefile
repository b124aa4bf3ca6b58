# Entry points. Every target that needs tools installs them first (reproducers/setup-host).
# Run as root: the VMs run knfsd and mounts, and setup uses apt-get.
PY      := .venv/bin/python
PYTEST  := .venv/bin/pytest
RESULTS ?= results
# The demo's workload (issue: NFSv4.1, 50,000 files on an ext4 export).
DEMO_ARGS ?= --files 50000 --nfs 4.1 --fs ext4 --timeout 150

# The quick tests of `make check`: each file under a few seconds (measured with --durations):
# the golden outputs, the import layering, the habits, and the analyzer's rules on small inputs.
QUICK_TESTS ?= tests/test_golden.py tests/test_imports.py tests/test_habits.py
CHECKS := check-ruff check-format check-shell check-types check-tests check-c check-c-format
# mypy's incremental cache, kept across clones (a cold run takes a minute on 2 busy cores).
MYPY_CACHE ?= $(shell reproducers/cache-dir mypy)

.PHONY: setup setup-build demo check $(CHECKS) fuzz test-fast test test-guests test-builds test-analyzer test-builds-logged test-analyzer-logged fetch-guests fetch-series fetch-tools test-kernel test-prometheus test-bisect test-full bench \
	fixtures clean

setup:
	reproducers/setup-host

setup-build:
	reproducers/setup-host --kernel-build

# Reproduce on stock Debian 5.10 and 6.1 in VMs, then print the two side by side.
demo: setup
	reproducers/demo $(RESULTS)/demo $(DEMO_ARGS)

# What a developer runs on every change (CI's first stage), under 90 s: the static checks and
# the quick tests, side by side, each one's findings shown even when another fails.
check: setup
	$(MAKE) --no-print-directory -k -j3 --output-sync=target $(CHECKS)

# ruff's lint and format over the Python (the rules are in pyproject.toml).
check-ruff:
	.venv/bin/ruff check --output-format concise .

check-format:
	.venv/bin/ruff format --check --output-format concise .

# shellcheck over every shell script of the tree: a bash or sh shebang, or a sourced library
# (*.sh); .shellcheckrc lets it read what they source.
check-shell:
	find . \( -name .git -o -name .venv -o -name '$(RESULTS)' -o -name '*_cache' \) -prune -o \
		-type f \( -name '*.sh' -o ! -name '*.*' \) -exec awk 'FNR == 1 { \
		if (/^#!\/bin\/(ba)?sh/ || FILENAME ~ /\.sh$$/) print FILENAME; nextfile }' {} + | \
		sort | xargs shellcheck -f gcc

# mypy over the package (the files and rules are in pyproject.toml).
check-types:
	.venv/bin/mypy --cache-dir $(MYPY_CACHE)

check-tests:
	$(PYTEST) -q -p no:cacheprovider $(QUICK_TESTS)

# The analyzer's tests on the recorded fixtures, with the golden outputs and the import
# layering, on every core (pytest-xdist; one file's tests stay on one worker, as record's share
# the host's tracefs); no VM, no kernel build (not even the series' fs/nfs), and not the slow
# oracle and fuzz tests (`make test` runs those). 10-20 minutes on 2 shared cores.
test-fast: setup
	$(PYTEST) -q -n auto --dist loadfile -m 'not vm and not kernel and not slow'

# The suite CI runs: analyzer tests on recorded fixtures, VM end-to-end runs on stock kernels,
# and the kernel series applied to a fresh 5.10 tree with the objects it touches compiled
# (what a fresh run takes: docs/measurements/fresh-test.md; the longer runs are the opt-in
# targets below). Three runs side by side, balanced so that none waits long for the others
# (a guest is TCG, one core while it is up): the guests, their progress shown as it comes;
# the kernel builds (the bisect skip and the series), then the guests of GUESTS_BESIDE_BUILDS;
# and the analyzer's tests on every core (pytest-xdist; one file's tests on one worker, as
# record's share the host's tracefs). The last two each into a log shown whole when it ends,
# so that none cuts another's lines. (pytest-xdist cannot run the guests: its loadgroup does
# not group under pytest 9, which moved the node id it edits, and a kernel's scenarios must run
# in one session to share its one boot.)
#
# Before them, beside the host's setup, the series' source and every guest's kernel are fetched
# and unpacked into the cache: on a fresh machine that is minutes of download and unpacking,
# which in a run would hold up its tests, and two runs unpacking one kernel at once would remove
# each other's half-made tree (debian-fetch takes a lock per suite; vm-run's unpacking none).
# At the end, its wall time and its CPU time: user + system of every process the run waited
# for, which the shell of this recipe holds as its children's times (/proc/PID/stat fields 16
# and 17, in clock ticks); a machine shared with other work shows in their gap, not in a test.
test:
	@t0=$$(date +%s); \
	$(MAKE) --no-print-directory -j3 setup-build fetch-series fetch-guests fetch-tools && \
	$(MAKE) --no-print-directory -k -j3 test-guests test-builds-logged test-analyzer-logged; \
	rc=$$?; set -- $$(cut -d' ' -f16,17 /proc/$$$$/stat); \
	echo "make test: exit status $$rc, $$(($$(date +%s) - t0)) s of wall time, $$(awk "BEGIN { printf \"%.1f\", ($$1 + $$2) / $$(getconf CLK_TCK) }") s of CPU (user + system of every process it ran)"; \
	exit $$rc

# The kernels the guests of make test boot (tests/vmrun.py's SCENARIOS, and test_vm.py's own).
GUEST_KERNELS ?= 5.10 6.1 6.12 7.3
fetch-guests:
	for k in $(GUEST_KERNELS); do \
		reproducers/vm-run --fetch-only --kernel debian:$$k --results $(RESULTS) >/dev/null || exit 1; \
	done

# trixie's trace-cmd (tests/tools/trace-cmd-trixie: the zlib conversions of test_cli and
# test_tracedat), unpacked into the cache: fetched in the analyzer's run, it held up a worker
# for 156 s of the fresh run (docs/measurements/fresh-test.md).
fetch-tools:
	tests/tools/trace-cmd-trixie list -c >/dev/null

fetch-series:
	kernel-patches/prepare-tree --fetch >/dev/null

# A part of make test into $(RESULTS)/PART.log, shown whole when it ends. (The directory is made
# in the line that runs make, which `make -n` runs too: it prints the part's commands.)
test-builds-logged test-analyzer-logged: %-logged:
	@echo "make test: $* runs beside the guests, into $(RESULTS)/$*.log"
	@mkdir -p $(RESULTS); $(MAKE) --no-print-directory $* >$(RESULTS)/$*.log 2>&1; rc=$$?; \
	echo "=== $* ($(RESULTS)/$*.log), exit status $$rc:"; \
	cat $(RESULTS)/$*.log; exit $$rc

# The guests that test-builds boots once its builds are done, not test-guests: the 5.10 guest
# (loopback, and record and watch) and the 6.12 one. The tests of one kernel stay in one run,
# which boots its guest once for all of them. Measured fresh at load 9.6 (fresh-test.md):
# builds 529 s, the 5.10 guest 731 s, 6.12 276 s; the 6.1 guest 954 s, 7.3 511 s and the three
# tests that boot their own 162 s.
GUESTS_BESIDE_BUILDS := tests/test_vm.py::test_stock_5_10_restarts_and_fails \
	tests/test_record.py::test_stock_5_10_record_check_watch \
	'tests/test_record.py::test_stock_record_check_good[6.12]'

# The three parts of make test (which sets up first; run alone, they expect `make setup-build`).
test-guests:
	$(PYTEST) -ra --durations=0 -m 'vm and not kernel' $(GUESTS_BESIDE_BUILDS:%=--deselect %)

test-builds:
	$(PYTEST) -ra --durations=0 -m 'kernel'; rc=$$?; \
	$(PYTEST) -ra --durations=0 -m 'vm and not kernel' $(GUESTS_BESIDE_BUILDS) || rc=1; \
	exit $$rc

test-analyzer:
	$(PYTEST) -ra --durations=0 -n auto --dist loadfile -m 'not vm and not kernel'

# Opt-in: fs/nfs built after each patch of the series (bisectability), and a whole patched
# 5.10 kernel built, booted and run with the reproducer (long).
test-kernel: setup-build
	NFSRT_TEST_KERNEL=1 $(PYTEST) -ra -m kernel tests/test_kernel_series.py tests/test_record.py

# Opt-in: a real Prometheus scrapes `watch --metrics` in a stock 5.10 and a 6.1 guest (two
# more guests, each longer than any in make test: Prometheus and two starts of watch).
test-prometheus: setup
	NFSRT_TEST_PROMETHEUS=1 $(PYTEST) -ra tests/test_record.py -k prometheus_scrapes_watch

test-bisect: setup-build
	NFSRT_TEST_BISECT=1 $(PYTEST) -ra -s tests/test_bisect.py::test_bisect_names_the_cookie_resume_fix

# Opt-in: the sweeps at full size where make test runs a sample of every kind (the `full`
# marker, conftest.FULL; the samples chosen by conftest.one_of_each_kind): every 97th bit of the
# bad fixture flipped in each copy (make test: every 997th), every number edited three lines
# around each restart (make test: one), 8 bits flipped in each of test_one_answer's traces (make
# test: 3) and its lossy captures with two seeds (make test: one); every trace.dat fixture
# decoded against `trace-cmd report -R`, converted four ways, walked both ways (its damaged
# pages too), its field types checked, fuzzed, cut and read in stretches, and its report texts
# compared (make test: one fixture of each kind, print formats too for the texts); 120 line
# edits of each style of the bad report (make test: 4 of each kind of edit); 40 and 24 damaged
# captures against tshark (make test: each kind of damage twice); and the export of every
# readdir run (make test: one of each kind).
test-full: setup
	NFSRT_TEST_FULL=1 $(PYTEST) -ra --durations=0 -m full

# Time the trace.dat reader and `nfs-readdir analyze` (its slab analysis) against `trace-cmd
# report` and `report -R`, and against the floor (decompressing the same pages, nothing
# decoded), on real host traces of about 8.4, 17 and 50 M kmem/sched events (one recording of
# 50 M through tracefs, the smaller two cut from its start; kept in
# ~/.cache/nfs-readdir-trace/bench and reused): medians of 3 runs at 1x
# and 1 run at 2x and 6x, tools interleaved, then 5 more rounds of analyze and analyze warm
# (the analysis without start-up) at every size for the time per event (20-30 minutes on 2
# cores, an hour or more when they are busy: report alone takes 7-18 minutes at 50 M). Table,
# data and plot (time vs size) in $(RESULTS)/bench. E.g.:
#   make bench BENCH_ARGS="--repeat 5 --repeat-large 2 --modes 'need slab all'"
#   BENCH_SCALES=1 make bench BENCH_ARGS="--repeat 1 --skip 'report -R'"
#   make bench BENCH_ARGS="--pieces --repeat-flat 10"   (the 50 M trace whole and in 2, 3 and
#       6 slices: the time per event with the same events at every size; 5 minutes)
#
# Then the capture decoder: `analyze` of captures of 1 M and 5 M packets (made by make-capture
# from a real one, 1.3 and 6.5 GB, kept in the same cache) against `tshark -r FILE > /dev/null`:
# wall and CPU time, time per packet, peak RSS; capture.md, .json and .png in $(RESULTS)/bench.
#   make bench BENCH_CAPTURE_ARGS="--sizes 1000000 --repeat 3 --with-tshark-analyze"
#
# Then issue 45's targets (needed-run): reading what the readdir analysis needs of traces of
# about 10, 50 and 100 M events of which 99.9% are not needed, against `trace-cmd report` in
# the same run: the ratio, peak memory and time per event, with the load average beside them;
# needed.md and .json in $(RESULTS)/bench (`trace-cmd report` is timed at 10 M only: at 50 M
# it alone takes 25 minutes). Its traces: one make-trace recording of 100 M events (6.4 GB of
# ring buffer on 2 CPUs while it records, about 6 minutes of workload), the smaller cut from
# it. Extracted by trixie's trace-cmd 3.3: bookworm's 3.1.6 writes no trace data for more
# than about 2 GB of ring buffer per CPU.
#
# Last, check of three small recorded traces (a git bisect run step) against the interpreter's
# start and numpy's import alone, 15 rounds interleaved: CPU, wall, peak RSS and issue 45's
# targets, and each process's instructions (callgrind: a count the load does not move);
# check.md and .json in $(RESULTS)/bench.
BENCH_NEEDED_DIR ?= $(shell reproducers/cache-dir bench)/needed
bench: setup fetch-tools
	analyzer/bench/make-trace
	$(PY) analyzer/bench/run --out $(RESULTS)/bench $(BENCH_ARGS)
	$(PY) analyzer/bench/capture-run --out $(RESULTS)/bench $(BENCH_CAPTURE_ARGS)
	TRACE_CMD=$(CURDIR)/tests/tools/trace-cmd-trixie BENCH_BUFFER_KB=80000 \
		BENCH_SCALES="4 20 40" analyzer/bench/make-trace $(BENCH_NEEDED_DIR)
	$(PY) analyzer/bench/needed-run --dir $(BENCH_NEEDED_DIR) --scales 4 --repeat 3 \
		--out $(RESULTS)/bench/needed-10m $(BENCH_NEEDED_ARGS)
	$(PY) analyzer/bench/needed-run --dir $(BENCH_NEEDED_DIR) --scales 20,40 \
		--tools analyze,need --out $(RESULTS)/bench/needed-large $(BENCH_NEEDED_ARGS)
	$(PY) analyzer/bench/needed-run --out $(RESULTS)/bench \
		--from $(RESULTS)/bench/needed-10m/needed.json $(RESULTS)/bench/needed-large/needed.json
	$(PY) analyzer/bench/check-run --instructions --out $(RESULTS)/bench $(BENCH_CHECK_ARGS)

# Re-record the test fixtures with the reproducer (see tests/fixtures/*/COMMAND).
fixtures: setup
	tests/fixtures/record

clean:
	rm -rf $(RESULTS) .pytest_cache

# The C of the compiled readers (and their fuzz harnesses), compiled with every warning an
# error (check-c) and in one style (check-c-format, .clang-format).
C_STRICT ?= $(wildcard analyzer/nfsreaddir/_*.c analyzer/nfsreaddir/csrc/*/*.c \
	tests/fuzz/harness/*.c)
C_FORMATTED ?= $(sort $(C_STRICT) $(wildcard analyzer/nfsreaddir/csrc/*/*.h \
	tests/fuzz/harness/*.h))
PY_INCLUDE = $(shell $(PY) -c 'import sysconfig; print(sysconfig.get_paths()["include"])')

check-c:
	for f in $(C_STRICT); do \
		cc -Wall -Wextra -Werror -fsyntax-only -I$(PY_INCLUDE) -Ianalyzer/nfsreaddir $$f || exit 1; \
	done

check-c-format:
	clang-format --dry-run -Werror $(C_FORMATTED)

# Coverage-guided fuzzing of the readers of other machines' files (tests/fuzz/harness/README.md):
# each target for FUZZ_SECONDS, one after the other; prints each one's executions, and keeps
# an input that crashes one in tests/fuzz/TARGET/ (which make test replays).
FUZZ_SECONDS ?= 60
FUZZ_TARGETS ?= ringbuf zchunks wiredecode slab text
fuzz: setup
	nice $(PY) tests/fuzz/harness/run.py fuzz --seconds $(FUZZ_SECONDS) $(FUZZ_TARGETS)
