# shellcheck shell=bash
# Shared by the loopback reproducers: a knfsd export and NFS mounts over 127.0.0.1, trace-cmd
# recording with trace markers, periodic dcache/mountstats samples, and cleanup that undoes
# exactly what was set up, whatever point the run stopped at.
#
# A reproducer sets RESULTS and NAME, sources this file, calls `lb_init`, then the lb_* steps.
# Everything it starts is registered with lb_on_exit, and lb_cleanup runs it in reverse order on
# exit, error, SIGINT or SIGTERM.

LB_TOP=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
TRACEFS=/sys/kernel/tracing
LB_UNDO=()		# cleanup commands, run last-registered first
LB_CLEANED=0

lb_log() { printf '%s %s: %s\n' "$(date +%T)" "$NAME" "$*" | tee -a "$RESULTS/log" >&2; }
lb_die() { lb_log "ERROR: $*"; exit 125; }	# 125: could not run, in git-bisect terms

lb_on_exit() { LB_UNDO+=("$*"); }

lb_cleanup() {
	local rc=$? i
	[ "$LB_CLEANED" = 1 ] && return
	LB_CLEANED=1
	trap '' INT TERM
	for ((i = ${#LB_UNDO[@]} - 1; i >= 0; i--)); do
		eval "${LB_UNDO[i]}" >>"$RESULTS/log" 2>&1 || lb_log "cleanup step failed: ${LB_UNDO[i]}"
	done
	return $rc
}

lb_interrupted() {
	lb_log "interrupted: cleaning up"
	lb_cleanup
	exit 130
}

# lb_init: check we can run at all, make the work directory, arm the cleanup.
lb_init() {
	mkdir -p "$RESULTS" || { echo "$NAME: cannot create $RESULTS" >&2; exit 125; }
	: >"$RESULTS/log"
	[ "$(id -u)" = 0 ] || lb_die "must run as root (knfsd, mounts, tracing)"
	local t
	for t in exportfs rpc.nfsd rpc.mountd rpcbind mount.nfs trace-cmd python3; do
		command -v "$t" >/dev/null ||
			lb_die "$t not found: install nfs-kernel-server and trace-cmd (reproducers/setup-host)"
	done
	python3 -c 'import nfsreaddir' 2>/dev/null ||
		lb_die "the analyzer is not importable by $(command -v python3): run reproducers/setup-host"
	trap lb_cleanup EXIT
	trap lb_interrupted INT TERM
	WORK=$(mktemp -d /run/nfsrt.XXXXXX) || lb_die "cannot create a work directory in /run"
	lb_on_exit "rm -rf '$WORK'"
	modprobe -q -a sunrpc nfs nfsv3 nfsv4 nfsd loop 2>/dev/null || true	# built in on some kernels
	mountpoint -q "$TRACEFS" || mount -t tracefs tracefs "$TRACEFS" ||
		lb_die "no tracefs at $TRACEFS"
	lb_log "kernel $(uname -r), work directory $WORK, results in $RESULTS"
}

# lb_mkfs FS IMAGE SIZE_MB INODES: a sparse IMAGE file of SIZE_MB (at least 320 MiB for xfs:
# xfsprogs 5.19 and later refuse a file system under 300 MB) made an ext4 (room for INODES
# inodes, 0 for mkfs's default) or xfs file system.
lb_mkfs() {
	local fs=$1 img=$2 size=$3 inodes=$4 opts=()
	command -v "mkfs.$fs" >/dev/null || lb_die "mkfs.$fs not found (e2fsprogs/xfsprogs)"
	[ "$fs" != xfs ] || [ "$size" -ge 320 ] || size=320
	truncate -s "${size}M" "$img"
	if [ "$fs" = ext4 ]; then
		[ "$inodes" -gt 0 ] && opts=(-N $((inodes + 1000)))
		mkfs.ext4 -q -F "${opts[@]}" "$img"
	else
		mkfs.xfs -q -f "$img"
	fi >>"$RESULTS/log" 2>&1 || lb_die "mkfs.$fs failed"
}

# lb_export_fs FS SIZE_MB INODES: a fresh file system at $WORK/export (tmpfs, ext4 or xfs on a
# loop file in /run), exported with the options from exports/readdir.exports.
lb_export_fs() {
	local fs=$1 size=$2 inodes=$3 opts
	EXPORT=$WORK/export
	mkdir -p "$EXPORT"
	case $fs in
	tmpfs)
		mount -t tmpfs -o size="${size}m,nr_inodes=$((inodes + 1000))" nfsrt "$EXPORT" ||
			lb_die "cannot mount tmpfs"
		;;
	ext4 | xfs)
		lb_mkfs "$fs" "$WORK/export.img" "$size" "$inodes"
		mount -o loop "$WORK/export.img" "$EXPORT" || lb_die "cannot loop-mount the $fs image"
		;;
	*) lb_die "unknown file system '$fs' (tmpfs, ext4, xfs)" ;;
	esac
	lb_on_exit "umount '$EXPORT'"

	mountpoint -q /proc/fs/nfsd || {
		mount -t nfsd nfsd /proc/fs/nfsd || lb_die "cannot mount the nfsd file system"
		lb_on_exit "umount /proc/fs/nfsd"
	}
	# Start only what is not running already, and stop only what was started here: on a host
	# with a live NFS server the reproducer adds one export and removes it again.
	if ! pgrep -x rpcbind >/dev/null; then
		mkdir -p /run/rpcbind
		rpcbind -w || lb_die "rpcbind failed to start"
		lb_on_exit "pkill -x rpcbind"
	fi
	sed -n 's/^\(@EXPORT@\)[[:space:]]*//p' "$LB_TOP/exports/readdir.exports" | while read -r spec; do
		local client=${spec%%(*} o=${spec#*(}
		exportfs -o "${o%)}" "$client:$EXPORT" || exit 1
	done || lb_die "exportfs failed for the options in exports/readdir.exports"
	lb_on_exit "exportfs -u '127.0.0.1:$EXPORT'"
	if ! pgrep -x rpc.mountd >/dev/null; then
		rpc.mountd || lb_die "rpc.mountd failed to start"
		lb_on_exit "pkill -x rpc.mountd"
	fi
	# shellcheck source=../../exports/server.conf
	. "$LB_TOP/exports/server.conf"
	if [ "$(cat /proc/fs/nfsd/threads 2>/dev/null || echo 0)" = 0 ]; then
		rpc.nfsd -G "$NFSD_GRACE_SECONDS" -L "$NFSD_LEASE_SECONDS" "$NFSD_THREADS" ||
			lb_die "rpc.nfsd failed"
		lb_on_exit "rpc.nfsd 0"
	fi
	lb_log "exported $fs at $EXPORT"
}

# lb_mount VERS WHERE EXTRA_OPTS: mount the export over loopback.
lb_mount() {
	local vers=$1 where=$2 opts=$3 src
	case $vers in
	3) src=127.0.0.1:$EXPORT ;;
	4 | 4.0 | 4.1 | 4.2) src=127.0.0.1:/ ;;	# the export is the v4 pseudo-root (fsid=0)
	*) lb_die "unknown NFS version '$vers' (3, 4.0, 4.1, 4.2)" ;;
	esac
	mkdir -p "$where"
	mount -t nfs -o "vers=$vers,$opts" "$src" "$where" || lb_die "mount $src on $where failed"
	lb_on_exit "lb_umount '$where'"
}

# An NFS mount can stay busy for a moment after a killed reader; never leave it behind.
lb_umount() {
	local i
	mountpoint -q "$1" || return 0
	for i in 1 2 3 4 5; do
		umount "$1" 2>/dev/null && return 0
		sleep 1
	done
	umount -f "$1" 2>/dev/null || umount -l "$1"
}

lb_mark() { echo "nfsrt: $*" >"$TRACEFS/trace_marker"; }

# lb_readdir_ops MOUNTPOINT: "READDIR READDIRPLUS" op counts of that mount, from mountstats.
lb_readdir_ops() {
	awk -v mnt="$1" '
		$1 == "device" { here = ($5 == mnt) }
		here && $1 == "READDIR:" { rd = $2 }
		here && $1 == "READDIRPLUS:" { rdp = $2 }
		END { printf "%d %d\n", rd, rdp }' /proc/self/mountstats
}

# One sample of what the analyzer plots under the listing: dcache size, dentry slab, and the
# READDIR counts of the mounts given.
lb_sample() {
	local d slab
	read -r -a d </proc/sys/fs/dentry-state
	slab=$(awk '$1 == "dentry" { print "slab_active=" $2, "slab_total=" $3, "slab_objsize=" $4 }' \
		/proc/slabinfo 2>/dev/null)
	lb_mark "sample nr_dentry=${d[0]} nr_unused=${d[1]} nr_negative=${d[4]} $slab$(lb_mount_ops "$@")"
}

# lb_mount_ops MOUNT...: " readdir=N readdirplus=M" for each mount, for a sample marker.
lb_mount_ops() {
	local mnt
	for mnt in "$@"; do
		# shellcheck disable=SC2046  # the two counts, as $1 and $2
		set -- $(lb_readdir_ops "$mnt")
		printf ' readdir=%s readdirplus=%s' "$1" "$2"
	done
}

# lb_every SECONDS CMD...: run CMD every SECONDS in the background (as $SAMPLER) until
# lb_stop_bg $SAMPLER, or the cleanup.
lb_every() {
	local every=$1
	shift
	( trap - EXIT INT TERM; while :; do "$@"; sleep "$every"; done ) &
	SAMPLER=$!
	lb_on_exit "lb_stop_bg $SAMPLER"
}

# lb_sampler SECONDS MOUNT...: lb_sample every SECONDS in the background until lb_stop_bg.
lb_sampler() { lb_every "$1" lb_sample "${@:2}"; }

# wait returns the killed job's 143, which set -e would take for a failure of ours.
lb_stop_bg() { kill "$1" 2>/dev/null && wait "$1" 2>/dev/null || true; }

# lb_trace_start OUT EVENT...: trace-cmd record into OUT, returning once it records.
lb_trace_start() {
	local out=$1 e args=()
	shift
	for e in "$@"; do args+=(-e "$e"); done
	lb_trace_record "$out" "${args[@]}"
}

# lb_trace_record OUT TRACE-CMD-ARGS...: the same with trace-cmd's own arguments (-e EVENT
# -f FILTER ...), for filtered events.
lb_trace_record() {
	local out=$1 i
	shift
	# trace-cmd turns tracing on only when its recorders run: wait for that, not for a delay.
	echo 0 >"$TRACEFS/tracing_on"
	trace-cmd record -q -b 20000 -o "$out" "$@" >>"$RESULTS/log" 2>&1 &
	TRACER=$!
	lb_on_exit "lb_trace_stop"
	for i in $(seq 600); do
		[ "$(cat "$TRACEFS/tracing_on")" = 1 ] && return 0
		kill -0 "$TRACER" 2>/dev/null || lb_die "trace-cmd record failed: see $RESULTS/log"
		sleep 0.1
	done
	lb_die "trace-cmd record did not start within 60 s"
}

lb_trace_stop() {
	[ -n "${TRACER:-}" ] || return 0
	kill -INT "$TRACER" 2>/dev/null && wait "$TRACER" 2>/dev/null || true
	TRACER=
}

# lb_capture_start OUT [IFACE]: tcpdump of the NFS traffic on IFACE (default the loopback) into
# OUT (pcap: libpcap
# writes no pcapng), returning once it captures. The analyzer reads the same answers from it as
# from the trace (nfsreaddir/trace/capture.py). A plain pcap file does not keep the kernel's drop
# count, so lb_capture_stop reads it from tcpdump's summary into CAPTURE_STATS. tcpdump's own
# stderr (its "listening on" line and the captured/received/dropped summary) is kept beside OUT
# as OUT-without-.pcap.tcpdump.log. The reproducer may set CAPTURE_BUFFER_KIB (tcpdump -B,
# default 32768) and CAPTURE_SNAPLEN (tcpdump -s, default 0: whole packets): a small buffer makes
# tcpdump drop packets as on a busy machine, a small snaplen cuts READDIR replies short.
lb_capture_start() {
	local out=$1 iface=${2:-lo} i
	command -v tcpdump >/dev/null ||
		lb_die "tcpdump not found: install it on the host (reproducers/setup-host), or --capture off"
	CAPTURE_ERR=${out%.pcap}.tcpdump.log
	CAPTURE_STATS=
	# -Z root: Debian's tcpdump otherwise drops to its own user, who cannot write RESULTS.
	# -B: by default a 32 MiB kernel buffer; under emulation a busy listing outruns tcpdump's
	# reads.
	tcpdump -i "$iface" -s "${CAPTURE_SNAPLEN:-0}" -B "${CAPTURE_BUFFER_KIB:-32768}" -Z root \
		-w "$out" port 2049 2>"$CAPTURE_ERR" &
	CAPTURER=$!
	lb_on_exit "lb_capture_stop"
	for i in $(seq 300); do
		if grep -q 'listening on' "$CAPTURE_ERR" 2>/dev/null; then
			lb_log "capturing the NFS traffic on $iface into $out"
			return 0
		fi
		kill -0 "$CAPTURER" 2>/dev/null ||
			lb_die "tcpdump failed: $(tr '\n' ' ' <"$CAPTURE_ERR")"
		sleep 0.1
	done
	lb_die "tcpdump did not start within 30 s"
}

# lb_capture_stop: stop tcpdump; CAPTURE_STATS="captured=N received=N dropped=N" from its
# summary (dropped: by the kernel, for want of buffer space).
lb_capture_stop() {
	[ -n "${CAPTURER:-}" ] || return 0
	kill -INT "$CAPTURER" 2>/dev/null
	# tcpdump writes its summary and exits at once; never let a stuck one hold the cleanup.
	for _ in $(seq 50); do
		kill -0 "$CAPTURER" 2>/dev/null || break
		sleep 0.1
	done
	kill -KILL "$CAPTURER" 2>/dev/null && lb_log "tcpdump did not stop on SIGINT: killed"
	wait "$CAPTURER" 2>/dev/null || true
	CAPTURER=
	# shellcheck disable=SC2034  # the reproducers read it
	CAPTURE_STATS=$(awk '/packets captured$/ { c = $1 } /packets received by filter$/ { r = $1 }
		/packets dropped by kernel$/ { d = $1 }
		END { printf "captured=%s received=%s dropped=%s", c, r, d }' "$CAPTURE_ERR")
	cat "$CAPTURE_ERR" >>"$RESULTS/log"
}

# lb_events_have EVENT: the running kernel has that event (system:name).
lb_events_have() { grep -qx "$1" "$TRACEFS/available_events"; }

# lb_readdir_events SET: EVENTS=(...) to record, with the kprobes they need added (and removed by
# the cleanup). The events and kprobes are the ones `nfs-readdir record` uses on this kernel
# (nfsreaddir/live/recordplan.py plans them from tracefs and kallsyms). SET is readdir (that plan),
# broad (every nfs and nfs4 event and sunrpc:rpc_request, with the plan's kprobes), or a
# comma-separated list of system:event, recorded as given plus the READDIR cookie kprobes where
# the kernel needs them (readdir-overhead's --events new measures exactly the series' events).
lb_readdir_events() {
	local plan line f
	plan=$(python3 -m nfsreaddir.live.recordplan plan 2>&1) || lb_die "$plan"
	EVENTS=()
	while IFS= read -r line; do
		case $line in
		kprobe*)
			IFS=$'\t' read -r -a f <<<"$line"
			# f: kprobe TABLE EVENT DEFINITION...
			case $1 in readdir | broad) ;; *) [ "${f[1]}" = rpc ] || continue ;; esac
			lb_kprobe "${f[@]:2}"
			;;
		event\ *)	# (a kprobe's event is in EVENTS once added)
			[ "$1" = readdir ] && [[ " ${EVENTS[*]} " != *" ${line#event } "* ]] &&
				EVENTS+=("${line#event }")
			;;
		warning\ *) lb_log "${line#warning }" ;;
		esac
	done <<<"$plan"
	case $1 in
	readdir) ;;
	broad) EVENTS+=(nfs nfs4 sunrpc:rpc_request syscalls:sys_enter_getdents64
		syscalls:sys_exit_getdents64) ;;
	*) IFS=, read -r -a f <<<"$1"; EVENTS+=("${f[@]}") ;;
	esac
	[ ${#EVENTS[@]} -gt 0 ] || lb_die "this kernel has none of the NFS readdir trace events"
}

# lb_kprobe EVENT DEFINITION...: add the kprobe in the first form the kernel takes (BTF names,
# $argN, registers: recordplan.py says which this kernel reads), remove it again on exit.
lb_kprobe() {
	local ev=$1 d
	shift
	for d in "$@"; do
		if echo "$d" >>"$TRACEFS/kprobe_events" 2>>"$RESULTS/log"; then
			lb_on_exit "echo '-:${ev/://}' >>'$TRACEFS/kprobe_events'"
			EVENTS+=("$ev")
			lb_log "kprobe: $d"
			return 0
		fi
	done
	lb_die "the kernel refused every form of the $ev kprobe: $*"
}


# lb_finish: results.json from the facts file and the traces (the analyzer reads them), then exit
# with the verdict: 0 PASS, 1 FAIL, 125 UNDECIDED (nothing exercised the bug, or the traces cannot
# tell). Under emulation the analyzer is slow, so vm-run sets NFSRT_DEFER_RESULTS=1 and does this
# step on the host, from the same results directory.
lb_finish() {
	if [ "${NFSRT_DEFER_RESULTS:-0}" = 1 ]; then
		lb_log "recorded; results.json is left to the caller (NFSRT_DEFER_RESULTS=1)"
		exit 0
	fi
	python3 -m nfsreaddir results "$RESULTS" >>"$RESULTS/log" 2>&1 ||
		lb_die "could not write results.json: see $RESULTS/log"
	local verdict rc=0
	verdict=$(python3 -m nfsreaddir results --verdict "$RESULTS") || rc=$?
	lb_log "$verdict"
	case $rc in
	0 | 1) exit "$rc" ;;
	*) exit 125 ;;
	esac
}

# lb_mount_as VERS WHERE [OPTS]: lb_mount with OPTS exactly as given (none: vers= alone, the
# client's defaults), for reproducers that compare mount options against a default mount.
lb_mount_as() {
	local vers=$1 where=$2 opts=${3-} src
	case $vers in
	3) src=127.0.0.1:$EXPORT ;;
	4 | 4.0 | 4.1 | 4.2) src=127.0.0.1:/ ;;
	*) lb_die "unknown NFS version '$vers' (3, 4.0, 4.1, 4.2)" ;;
	esac
	mkdir -p "$where"
	mount -t nfs -o "vers=$vers${opts:+,$opts}" "$src" "$where" ||
		lb_die "mount $src on $where (vers=$vers${opts:+,$opts}) failed"
	lb_on_exit "lb_umount '$where'"
}

# lb_mount_opcounts MOUNTPOINT: "OP=N ..." of every NFS operation count in that mount's
# mountstats (per-op statistics: calls sent), for a before/after difference.
lb_mount_opcounts() {
	awk -v mnt="$1" '
		$1 == "device" { here = ($5 == mnt); ops = 0 }
		here && /per-op statistics/ { ops = 1; next }
		here && ops && $1 ~ /^[A-Z_0-9]+:$/ { sub(":", "", $1); printf "%s=%d ", $1, $2 }
	' /proc/self/mountstats
}
