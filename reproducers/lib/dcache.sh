# shellcheck shell=bash
# Shared by the dcache-* reproducers, on top of lib/loopback.sh: option checks, the facts file,
# phase markers framed by samples, a wider dcache/slab sample, a fast lookup driver (perl: it
# starts at once, even in an emulated guest), local scratch file systems and memory cgroups.
#
# A reproducer sets NAME, sources loopback.sh and this file, parses its options with the dc_*
# checks, sets RESULTS, calls lb_init and then dc_init.

# ---------------------------------------------------------------- options (before lb_init)
dc_bad() { echo "$NAME: $*" >&2; exit 125; }
# dc_int OPTION VALUE MIN: VALUE is an integer >= MIN.
dc_int() {
	[[ $2 =~ ^[0-9]+$ ]] && [ "$2" -ge "$3" ] || dc_bad "$1 must be an integer >= $3 (got '$2')"
}
# dc_num OPTION VALUE: a non-negative decimal number.
dc_num() { [[ $2 =~ ^[0-9]+(\.[0-9]+)?$ ]] || dc_bad "$1 must be a number (got '$2')"; }
# dc_int_list OPTION VALUE MIN: comma-separated integers >= MIN.
dc_int_list() {
	local v
	[[ $2 =~ ^[0-9]+(,[0-9]+)*$ ]] || dc_bad "$1 takes comma-separated integers (got '$2')"
	for v in ${2//,/ }; do dc_int "$1" "$v" "$3"; done
}
dc_nfs_vers() { [[ $1 =~ ^(3|4|4\.[012])$ ]] || dc_bad "--nfs must be 3, 4.0, 4.1 or 4.2"; }
dc_export_fs() { [[ $1 =~ ^(ext4|xfs|tmpfs)$ ]] || dc_bad "--fs must be ext4, xfs or tmpfs"; }

# ---------------------------------------------------------------- run setup (after lb_init)
# dc_init: the facts file and the run facts every dcache reproducer writes.
dc_init() {
	FACTS=$RESULTS/facts
	: >"$FACTS"
	command -v perl >/dev/null || lb_die "perl not found (the lookup driver)"
	[ -r /proc/sys/fs/dentry-state ] || lb_die "no /proc/sys/fs/dentry-state"
	[ -r /proc/slabinfo ] || lb_die "/proc/slabinfo is not readable"
	# nr_negative is the 5th field since 5.0; before it the field is always 0.
	fact run.name "$NAME"
	fact run.kernel "$(uname -r)"
	fact run.nfs_utils "$(mount.nfs -V 2>&1 | sed -n 's/.*(\(.*\)).*/\1/p')"
	fact run.trace_cmd "$(trace-cmd --version 2>&1 | grep -m1 version || true)"
	fact run.dhash_entries "$(dmesg 2>/dev/null | sed -n 's/.*Dentry cache hash table entries: \([0-9]*\).*/\1/p' | head -1)"
	fact run.mem_kb "$(awk '$1 == "MemTotal:" { print $2 }' /proc/meminfo)"
	fact run.cpus "$(nproc)"
}

fact() { echo "$1=$2" >>"$FACTS"; }

# dc_run_marker KEY=VALUE...: the run line the analyzer reads from each trace.
dc_run_marker() { lb_mark "run kernel=$(uname -r) reproducer=$NAME $*"; }

# ---------------------------------------------------------------- samples
# Slab caches sampled beside the dentry cache (slabinfo name -> sample key prefix). Caches
# that a kernel merges or does not have are left out of its samples.
DC_SLABS="kmalloc-32:kmalloc32 kmalloc-64:kmalloc64 kmalloc-96:kmalloc96 kmalloc-192:kmalloc192
kmalloc-cg-32:kmalloc_cg32 kmalloc-cg-64:kmalloc_cg64 radix_tree_node:radix_tree_node
nfs_inode_cache:nfs_inode ext4_inode_cache:ext4_inode"

# dc_stats: the key=value words of one sample, without the readdir counts.
#   nr_dentry nr_unused nr_negative     /proc/sys/fs/dentry-state
#   slab_active slab_total slab_objsize the dentry line of /proc/slabinfo
#   <cache>_active                      objects in use in the caches of DC_SLABS
#   kmalloc_bytes                       sum of active x size over every kmalloc-* cache
#   slab_kb sunreclaim_kb percpu_kb     /proc/meminfo Slab, SUnreclaim, Percpu
dc_stats() {
	local d
	read -r -a d </proc/sys/fs/dentry-state
	printf 'nr_dentry=%s nr_unused=%s nr_negative=%s' "${d[0]}" "${d[1]}" "${d[4]:-0}"
	awk -v slabs="$DC_SLABS" '
		BEGIN { n = split(slabs, s, /[ \n]+/); for (i = 1; i <= n; i++) { split(s[i], kv, ":"); key[kv[1]] = kv[2] } }
		FILENAME == "/proc/slabinfo" && $1 == "dentry" {
			printf " slab_active=%d slab_total=%d slab_objsize=%d", $2, $3, $4 }
		FILENAME == "/proc/slabinfo" && ($1 in key) { printf " %s_active=%d", key[$1], $2 }
		FILENAME == "/proc/slabinfo" && $1 ~ /^kmalloc-/ { kb += $2 * $4 }
		FILENAME == "/proc/meminfo" && $1 == "Slab:" { slab = $2 }
		FILENAME == "/proc/meminfo" && $1 == "SUnreclaim:" { sun = $2 }
		FILENAME == "/proc/meminfo" && $1 == "Percpu:" { pcpu = $2 }
		END { printf " kmalloc_bytes=%d slab_kb=%d sunreclaim_kb=%d percpu_kb=%d", kb, slab, sun, pcpu }
	' /proc/slabinfo /proc/meminfo
}

# dc_sample [label=NAME] [MOUNT...]: one `nfsrt: sample` marker; the label (no spaces) names an
# explicit sample for the analyzer; each MOUNT adds its readdir= readdirplus= counts.
dc_sample() {
	local label="" mnt mounted=() words
	case ${1:-} in label=*) label=" $1"; shift ;; esac
	for mnt in "$@"; do
		mountpoint -q "$mnt" && mounted+=("$mnt")
	done
	words=$(dc_stats)
	[ -z "${DC_SAMPLE_MORE:-}" ] || words+=" $($DC_SAMPLE_MORE)"
	lb_mark "sample $words$(lb_mount_ops "${mounted[@]}")$label"
}

# A reproducer may name a function in DC_SAMPLE_MORE whose key=value words every sample adds.

# dc_sampler SECONDS [MOUNT...]: dc_sample every SECONDS in the background until
# lb_stop_bg $SAMPLER.
dc_sampler() { lb_every "$1" dc_sample "${@:2}"; }

# Exact slab counts for an explicit sample: flush the per-CPU slabs of the sampled caches
# (SLUB counts objects of CPU slabs as in use). Harmless where the files do not exist.
dc_shrink_slabs() {
	local c
	local slabs
	read -ra slabs <<<"${DC_SLABS//$'\n'/ }"
	for c in dentry "${slabs[@]%%:*}"; do
		[ -w "/sys/kernel/slab/$c/shrink" ] && echo 1 >"/sys/kernel/slab/$c/shrink" 2>/dev/null
	done
	return 0
}

# dc_phase_start NAME [KEY=VALUE...] / dc_phase_end NAME [KEY=VALUE...]: phase markers, each
# framed by a sample (before the start, after the end), so the analyzer's per-phase deltas
# never depend on the sampler's timing. Extra mounts for the samples: DC_MOUNTS (array).
dc_phase_start() {
	local p=$1
	shift
	dc_sample "${DC_MOUNTS[@]}"
	lb_mark "phase=$p event=start $*"
	DC_T0=$(date +%s.%N)
}
dc_phase_end() {
	local p=$1
	shift
	DC_SECONDS=$(awk -v a="$DC_T0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.3f", b - a }')
	lb_mark "phase=$p event=end seconds=$DC_SECONDS $*"
	dc_sample "${DC_MOUNTS[@]}"
	fact "$p.seconds" "$DC_SECONDS"
}
DC_MOUNTS=()

dc_drop_caches() { sync; echo 2 >/proc/sys/vm/drop_caches; }

# ---------------------------------------------------------------- the lookup driver
# perl -e "$DC_PERL" MODE ARGS:
#   time N REPS PATH...           REPS repetitions of: for each PATH (in an order that rotates),
#                                 N stat(PATH) and N fstat() of the same file, open since the
#                                 start (the reference: same getattr, no path walk), in
#                                 alternating blocks of 50. One line per repetition:
#                                 "PATH_NS:FSTAT_NS" per PATH, ns per call
#   stat PREFIX FROM TO DIR...    stat DIR/PREFIX<i> for FROM <= i < TO, each DIR in turn:
#                                 "found=F missing=M other=O"
#   create PREFIX FROM TO DIR...  create empty files DIR/PREFIX<i>: "created=C"
#   unlink PREFIX FROM TO DIR...  unlink DIR/PREFIX<i>: "removed=R missing=M other=O"
#   run FROM TO CMD ARG...         fork and exec CMD FROM <= i < TO times, waiting for each, with
#                                 every "%d" in an ARG replaced by i (e.g. cat DIR/nx%d):
#                                 "runs=N failed=F wall_s=W user_s=U sys_s=S" (user and system
#                                 time of the children, from times(2))
#   run FROM TO --ref K PATH CMD ARG...
#                                 the same, with K fstat()s of PATH (open since the start)
#                                 timed after each exec: the host's speed during the loop, as
#                                 " ref_ns=NS" per fstat (a guest's CPU time follows it), and
#                                 " exec_med_us=US": the median wall time of one fork+exec+wait
#                                 (a burst of the host's load moves a few runs, not the median)
#   mount TYPE SOURCE OPTIONS DIR...
#                                 make each DIR and mount SOURCE there with mount(2) (OPTIONS
#                                 as the kernel takes them, e.g. vers=4.1,addr=...): "mounted=N"
#   umount-under DIR              unmount every mount point below DIR (lazily if busy)
#                                 Both without a mount(8) per mount point: hundreds of
#                                 fork+exec take many minutes on a loaded emulated guest.
#   cgstat PREFIX FILES TOUCH CG... -- DIR...
#                                 for the i-th memory cgroup CG (from 0): move this process
#                                 into it, then on TOUCH of the DIRs (from the i-th on, round
#                                 the list) stat DIR/PREFIX<j> for i*FILES <= j < (i+1)*FILES.
#                                 One process for every memcg: spawning one per memcg takes
#                                 minutes for a thousand of them under emulation.
#                                 "found=F missing=M other=O pairs=P"
# Exit 2 on a usage error, 3 when `time` cannot open a path.
# shellcheck disable=SC2016  # perl's variables, for perl to expand
DC_PERL='
use strict; use warnings;
use Errno qw(ENOENT);
use Time::HiRes qw(clock_gettime CLOCK_MONOTONIC);
my $mode = shift @ARGV // "";
if ($mode eq "time") {
	my ($n, $reps, @paths) = @ARGV;
	@paths or exit 2;
	my @fh;
	for my $p (@paths) {
		open(my $fh, "<", $p) or do { print STDERR "cannot open $p: $!\n"; exit 3 };
		push @fh, $fh;
	}
	for my $r (0 .. $reps - 1) {
		my @out;
		for my $k (0 .. $#paths) {
			my $j = ($k + $r) % @paths;	# rotate the order from one repetition to the next
			my ($p, $fh) = ($paths[$j], $fh[$j]);
			# Blocks of 50 of each, alternating, so that a pause of the (virtual) CPU
			# falls on both about equally.
			my ($ts, $tf, $done) = (0, 0, 0);
			while ($done < $n) {
				my $b = $n - $done < 50 ? $n - $done : 50;
				my $t0 = clock_gettime(CLOCK_MONOTONIC);
				for (my $i = 0; $i < $b; $i++) { stat($p) }
				my $t1 = clock_gettime(CLOCK_MONOTONIC);
				for (my $i = 0; $i < $b; $i++) { stat($fh) }
				my $t2 = clock_gettime(CLOCK_MONOTONIC);
				$ts += $t1 - $t0;
				$tf += $t2 - $t1;
				$done += $b;
			}
			$out[$j] = sprintf "%.1f:%.1f", $ts * 1e9 / $n, $tf * 1e9 / $n;
		}
		print "@out\n";
	}
	exit 0;
}
if ($mode eq "run") {
	my ($from, $to, @cmd) = @ARGV;
	my ($refs, $rfh, $rt) = (0, undef, 0);
	if (@cmd and $cmd[0] eq "--ref") {
		(undef, $refs, my $rp, @cmd) = @cmd;
		open($rfh, "<", $rp) or do { print STDERR "cannot open $rp: $!\n"; exit 3 };
	}
	@cmd or exit 2;
	my ($runs, $failed, @each) = (0, 0);
	my @t0 = times;
	my $w0 = clock_gettime(CLOCK_MONOTONIC);
	for (my $i = $from; $i < $to; $i++) {
		my @argv = map { (my $a = $_) =~ s/%d/$i/g; $a } @cmd;
		my $e0 = clock_gettime(CLOCK_MONOTONIC);
		my $pid = fork() // die "fork: $!\n";
		if (!$pid) {
			open(STDOUT, ">", "/dev/null"); open(STDERR, ">", "/dev/null");
			exec { $argv[0] } @argv or exit 127;
		}
		waitpid($pid, 0);
		push @each, clock_gettime(CLOCK_MONOTONIC) - $e0;
		$runs++;
		$failed++ if $?;
		next unless $refs;
		my $r0 = clock_gettime(CLOCK_MONOTONIC);
		for (my $k = 0; $k < $refs; $k++) { stat($rfh) }
		$rt += clock_gettime(CLOCK_MONOTONIC) - $r0;
	}
	# The reference fstat()s count in the wall time, not in the times of the children.
	my $w = clock_gettime(CLOCK_MONOTONIC) - $w0;
	my @t1 = times;
	printf "runs=%d failed=%d wall_s=%.3f user_s=%.2f sys_s=%.2f", $runs, $failed, $w,
		$t1[2] - $t0[2], $t1[3] - $t0[3];
	if ($refs and $runs) {
		my @w = sort { $a <=> $b } @each;
		printf " ref_ns=%.1f exec_med_us=%.0f", $rt * 1e9 / ($refs * $runs),
			($w[$#w / 2] + $w[@w / 2]) / 2 * 1e6;
	}
	print "\n";
	exit 0;
}
# x86-64 system call numbers (the guests are x86-64).
my ($SYS_mount, $SYS_umount2, $MNT_DETACH) = (165, 166, 2);
if ($mode eq "mount") {
	my ($type, $src, $opts, @dirs) = @ARGV;
	@dirs or exit 2;
	my $n = 0;
	for my $d (@dirs) {
		mkdir($d) or $!{EEXIST} or die "mkdir $d: $!\n";
		syscall($SYS_mount, $src, $d, $type, 0, $opts) == 0 or die "mount $src on $d: $!\n";
		$n++;
	}
	print "mounted=$n\n";
	exit 0;
}
if ($mode eq "umount-under") {
	my ($top) = @ARGV;
	defined $top or exit 2;
	open(my $fh, "<", "/proc/self/mounts") or die "/proc/self/mounts: $!\n";
	my @at = grep { index($_, "$top/") == 0 } map { (split)[1] } <$fh>;
	my $n = 0;
	for my $d (reverse @at) {	# the last mounted first
		syscall($SYS_umount2, $d, 0) == 0 or syscall($SYS_umount2, $d, $MNT_DETACH) == 0 or
			die "umount $d: $!\n";
		$n++;
	}
	print "unmounted=$n\n";
	exit 0;
}
if ($mode eq "cgstat") {
	my ($prefix, $files, $touch, @rest) = @ARGV;
	my ($at) = grep { $rest[$_] eq "--" } 0 .. $#rest;
	defined $at or exit 2;
	my @cgs = @rest[0 .. $at - 1];
	my @dirs = @rest[$at + 1 .. $#rest];
	(@cgs and @dirs) or exit 2;
	$touch = @dirs if $touch > @dirs;
	my ($ok, $missing, $other, $pairs) = (0, 0, 0, 0);
	for my $i (0 .. $#cgs) {
		open(my $fh, ">", "$cgs[$i]/cgroup.procs") or die "cannot open $cgs[$i]/cgroup.procs: $!\n";
		# "0" is the writing process itself; the write moves it (its later allocations
		# are charged to that memcg).
		syswrite($fh, "0\n") or die "cannot move into $cgs[$i]: $!\n";
		close($fh);
		for my $j (0 .. $touch - 1) {
			my $d = $dirs[($i + $j) % @dirs];
			$pairs++;
			for (my $n = $i * $files; $n < ($i + 1) * $files; $n++) {
				if (stat("$d/$prefix$n")) { $ok++ } elsif ($! == ENOENT) { $missing++ } else { $other++ }
			}
		}
	}
	print "found=$ok missing=$missing other=$other pairs=$pairs\n";
	exit 0;
}
my ($prefix, $from, $to, @dirs) = @ARGV;
@dirs or exit 2;
my ($ok, $missing, $other) = (0, 0, 0);
for my $d (@dirs) {
	for (my $i = $from; $i < $to; $i++) {
		my $p = "$d/$prefix$i";
		my $r;
		if ($mode eq "stat") { $r = stat($p) ? 1 : 0 }
		elsif ($mode eq "unlink") { $r = unlink($p) }
		elsif ($mode eq "create") { $r = open(my $fh, ">", $p) ? 1 : 0 }
		else { exit 2 }
		if ($r) { $ok++ } elsif ($! == ENOENT) { $missing++ } else { $other++ }
	}
}
my %word = (stat => "found", unlink => "removed", create => "created");
print "$word{$mode}=$ok missing=$missing other=$other\n";
'
dc_perl() { perl -e "$DC_PERL" "$@"; }

# dc_median NUMBER...: the median (mean of the middle two for an even count).
dc_median() {
	printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 }
		END { if (NR % 2) printf "%.1f", v[(NR + 1) / 2]; else printf "%.1f", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

# dc_word KEY "k=v k=v": the value of KEY in a line of the driver's output.
dc_word() { sed -n "s/.*\\b$1=\\([0-9]*\\).*/\\1/p" <<<"$2"; }

# ---------------------------------------------------------------- scratch file systems
# dc_local_fs FS DIR SIZE_MB [INODES]: a fresh local file system (ext4 or xfs on a loop file,
# or tmpfs) at DIR; ext4 gets at least INODES inodes (its default ratio gives one per 16 KiB).
dc_local_fs() {
	local fs=$1 dir=$2 size=$3 inodes=${4:-0}
	mkdir -p "$dir"
	case $fs in
	tmpfs) mount -t tmpfs -o "size=${size}m" nfsrt-local "$dir" || lb_die "cannot mount tmpfs at $dir" ;;
	ext4 | xfs)
		lb_mkfs "$fs" "$dir.img" "$size" "$inodes"
		mount -o loop "$dir.img" "$dir" || lb_die "cannot loop-mount the $fs image at $dir"
		;;
	*) lb_die "unknown local file system '$fs' (ext4, xfs, tmpfs)" ;;
	esac
	# A run may unmount it itself (to see what the unmount frees).
	lb_on_exit "! mountpoint -q '$dir' || umount '$dir'"
}

# ---------------------------------------------------------------- tracing
# dc_callsite_filter REGEX: an ftrace filter matching call_site inside the kernel text
# functions whose names match REGEX (address ranges from /proc/kallsyms: from a symbol to
# the next one), or nothing when /proc/kallsyms hides the addresses or nothing matches.
dc_callsite_filter() {
	# cat, not sort FILE: sort reads /proc/kallsyms in a way that takes minutes under emulation
	# shellcheck disable=SC2002
	cat /proc/kallsyms 2>/dev/null | sort | awk -v re="$1" '
		$2 !~ /^[tT]$/ || NF > 3 { next }	# kernel text only, not modules
		{ if (open != "") {		# close the range open at the previous symbol
			if (n && open == hi[n]) hi[n] = $1; else { n++; lo[n] = open; hi[n] = $1 }
			open = "" }
		  if ($3 ~ re && $1 !~ /^0+$/) open = $1 }
		END { for (i = 1; i <= n; i++)
			printf "%s(call_site >= 0x%s && call_site < 0x%s)", (i > 1 ? " || " : ""), lo[i], hi[i]
		      print "" }'
}

# dc_hist_count EVENT FILTER: count EVENT's hits and sum its bytes_alloc inside the kernel
# (a hist trigger), for allocations too many to record one by one (a 5.10 guest with 256
# superblocks and a thousand memcgs makes millions). Returns 1 when the kernel has no hist
# triggers. The trigger is removed on exit; dc_hist_read EVENT prints "HITS BYTES" so far.
dc_hist_count() {
	local trig="$TRACEFS/events/${1/://}/trigger" spec="hist:keys=call_site:vals=bytes_alloc:size=256"
	[ -e "$TRACEFS/events/${1/://}/hist" ] || return 1
	[ -z "$2" ] || spec+=" if $2"
	echo "$spec" >"$trig" || lb_die "cannot set a hist trigger on $1"
	lb_on_exit "echo '!$spec' >'$trig'"
}
dc_hist_read() {
	awk '$1 == "{" { for (i = 1; i < NF; i++) { if ($i == "hitcount:") h += $(i + 1); if ($i == "bytes_alloc:") b += $(i + 1) } }
		END { printf "%d %d\n", h, b }' "$TRACEFS/events/${1/://}/hist"
}

# ---------------------------------------------------------------- memory cgroups (v2)
# dc_cgroup_init: a parent memory cgroup for this run at $DC_CG, the memory controller enabled
# for its children. Uses the cgroup2 hierarchy at /sys/fs/cgroup, or mounts one.
dc_cgroup_init() {
	local root=/sys/fs/cgroup
	if [ "$(stat -f -c %T "$root" 2>/dev/null)" != cgroup2fs ]; then
		root=$WORK/cgroup2
		mkdir -p "$root"
		mount -t cgroup2 nfsrt-cg "$root" || lb_die "cannot mount a cgroup2 hierarchy"
		lb_on_exit "umount '$root'"
	fi
	grep -qw memory "$root/cgroup.controllers" ||
		lb_die "the memory controller is not available in cgroup v2 (bound to a v1 hierarchy? boot with systemd.unified_cgroup_hierarchy=1)"
	if ! grep -qw memory "$root/cgroup.subtree_control"; then
		echo +memory >"$root/cgroup.subtree_control" || lb_die "cannot enable the memory controller at $root"
	fi
	DC_CG=$root/nfsrt-$$
	mkdir "$DC_CG" || lb_die "cannot create $DC_CG"
	lb_on_exit "dc_cgroup_remove '$DC_CG'"
	echo +memory >"$DC_CG/cgroup.subtree_control" || lb_die "cannot enable memory in $DC_CG"
}

# dc_cgroup_remove DIR: rmdir DIR and the cgroups below it, deepest first. Only cgroups this
# run made are removed; their processes (ours) have exited by then.
dc_cgroup_remove() {
	[ -d "$1" ] || return 0
	find "$1" -mindepth 1 -depth -type d -exec rmdir {} + 2>/dev/null
	rmdir "$1"
}

# dc_in_cgroup DIR CMD...: run CMD in memory cgroup DIR (the subshell moves itself there first).
dc_in_cgroup() {
	local cg=$1
	shift
	( echo "$BASHPID" >"$cg/cgroup.procs" && exec "$@" )
}
