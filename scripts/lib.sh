# shellcheck shell=bash
# Shared settings and helpers for scripts/install-deps, containerd-start and
# containerd-stop. Source it; it defines names only and has no side effects.

# Install prefix and pinned versions. Other code depends on these paths.
RODON_PREFIX=/opt/rodon/bin
RODON_STAMPS=/opt/rodon/stamps
CONTAINERD_MODULE=github.com/containerd/containerd/v2
CONTAINERD_VERSION=v2.4.2
GVISOR_MODULE=gvisor.dev/gvisor
GVISOR_VERSION=v0.0.0-20260527191743-a81fd9dd382e
SEAWEEDFS_MODULE=github.com/seaweedfs/seaweedfs
SEAWEEDFS_VERSION=v0.0.0-20261109003541-7506e5f91cd6

# Rodon's own containerd.
RODON_CONTAINERD_CONFIG=/etc/rodon/containerd.toml
RODON_CONTAINERD_SOCK=/run/rodon/containerd/containerd.sock
RODON_CONTAINERD_ROOT=/var/lib/rodon/containerd
RODON_CONTAINERD_STATE=/run/rodon/containerd
RODON_CONTAINERD_LOG=/var/log/rodon/containerd.log
RODON_CONTAINERD_PID=/run/rodon/containerd.pid

# Go lives outside the default PATH of a root shell on these machines. Not
# ~/go/bin: nothing of Rodon is installed there, and a tool found there would
# hide a missing install step (scripts/hand-installed reports it).
for d in /usr/local/go/bin; do
	case ":$PATH:" in *":$d:"*) ;; *) [[ -d $d ]] && PATH="$PATH:$d" ;; esac
done
export PATH

# say prints a progress line to stderr.
say() { printf '%s: %s\n' "${0##*/}" "$*" >&2; }

# die prints an error to stderr and exits 1.
die() { say "error: $*"; exit 1; }

require_root() { [[ $(id -u) -eq 0 ]] || die "must run as root"; }

# ctr_rodon runs ctr against Rodon's containerd.
ctr_rodon() { "$RODON_PREFIX/ctr" --address "$RODON_CONTAINERD_SOCK" "$@"; }

# containerd_answers succeeds if Rodon's containerd serves requests.
containerd_answers() {
	[[ -S $RODON_CONTAINERD_SOCK && -x $RODON_PREFIX/ctr ]] &&
		ctr_rodon version >/dev/null 2>&1
}

# containerd_pid prints the pid of Rodon's containerd if it runs: the one in
# the pid file, else a containerd started with Rodon's config.
containerd_pid() {
	local pid cmd p
	if [[ -r $RODON_CONTAINERD_PID ]]; then
		pid=$(<"$RODON_CONTAINERD_PID")
		if [[ $pid =~ ^[0-9]+$ && -r /proc/$pid/cmdline ]]; then
			cmd=$(tr '\0' ' ' 2>/dev/null <"/proc/$pid/cmdline" || true)
			if [[ $cmd == *containerd*"$RODON_CONTAINERD_CONFIG"* ]]; then
				echo "$pid"
				return 0
			fi
		fi
	fi
	for p in /proc/[0-9]*; do
		cmd=$(tr '\0' ' ' 2>/dev/null <"$p/cmdline" || true)
		if [[ $cmd == "$RODON_PREFIX/containerd --config $RODON_CONTAINERD_CONFIG "* ]]; then
			echo "${p#/proc/}"
			return 0
		fi
	done
	return 1
}

# alive succeeds if process $1 exists and is not a zombie.
alive() {
	local state
	state=$(awk '/^State:/ {print $2}' "/proc/$1/status" 2>/dev/null) || return 1
	[[ -n $state && $state != Z ]]
}

# log_tail prints the end of containerd's log to stderr.
log_tail() {
	[[ -r $RODON_CONTAINERD_LOG ]] || return 0
	say "last lines of $RODON_CONTAINERD_LOG:"
	tail -n "${1:-30}" "$RODON_CONTAINERD_LOG" >&2
}
