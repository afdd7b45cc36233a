# Sourced by the perftest scripts. rxe_gid DEV prints the index of DEV's
# IPv4-mapped RoCE v2 GID on port 1, as perftest's -x wants it, or fails.
rxe_gid() {
	local p=/sys/class/infiniband/$1/ports/1 i
	for ((i = 0; i < 16; i++)); do
		if [ "$(cat "$p/gid_attrs/types/$i" 2>/dev/null)" = "RoCE v2" ]; then
			case $(cat "$p/gids/$i") in 0000:0000:0000:0000:0000:ffff:*) echo "$i"; return 0 ;; esac
		fi
	done
	return 1
}
