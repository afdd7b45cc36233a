# Sourced by the bench scripts: order statistics over rounds. Values are
# one per line; a "-" line is a round that gave no value and is skipped.
# It brings lab/progress.sh's progress lines too.

. "$(dirname "${BASH_SOURCE[0]}")/progress.sh"

# median: the median of the values on stdin, or "nan" when there are none.
median() { grep -v '^-$' | sort -g | awk '{v[NR] = $1} END {if (NR == 0) print "nan"; else print v[int((NR + 1) / 2)]}'; }

# decimals N: each value on stdin with N decimals ("nan" stays as it is).
decimals() { awk -v n="$1" '$1 == "nan" || $1 == "-" {print; next} {printf "%.*f\n", n, $1}'; }

# ratios A B: line by line, A's value over B's (the same round of two
# programs run back to back, so a slow spell of the host weighs on both
# sides of each ratio).
ratios() { paste "$1" "$2" | awk '$1 != "-" && $2 != "-" && $2 > 0 {print $1 / $2}'; }

# median_ci: a distribution-free confidence interval of at least 95% for
# the median of the values on stdin — the k-th smallest and k-th largest
# of the n values, with k the largest rank whose binomial(n, 1/2) tail
# stays ≤ 2.5%; "-" when n is too small for one (under 6).
median_ci() {
	grep -v '^-$' | sort -g | awk '
		{v[NR] = $1}
		END {
			n = NR; k = 0; t = 0; c = 1 # c = n choose j
			for (j = 0; j < n; j++) { t += c / 2 ^ n; if (t > 0.025) break; k = j + 1; c = c * (n - j) / (j + 1) }
			if (k == 0) print "-"; else printf "%.2f–%.2f", v[k], v[n - k + 1]
		}'
}

# abrounds A B ROUNDS ITERS: ROUNDS rounds of `run SIDE BENCH ARGS…` (the
# caller's function) for sides A and B, alternating which goes first,
# appending osu_latency 8 B and osu_bw figures (1 MiB, or $BW bytes) to
# $w/lat.SIDE and $w/bw.SIDE (ITERS latency iterations).
abrounds() {
	local a=$1 b=$2 rounds=$3 iters=$4 r side order
	for ((r = 0; r < rounds; r++)); do
		order="$a $b"
		((r % 2)) && order="$b $a"
		for side in $order; do
			run $side osu_latency -m 8:8 -i $iters -x $((iters / 10)) >>"$w/lat.$side"
			run $side osu_bw -m "${BW:-1048576}:${BW:-1048576}" -i 20 -x 4 >>"$w/bw.$side"
		done
	done
}

# abtable A B: the table of abrounds' figures, A over B.
abtable() {
	local a=$1 b=$2 m name
	echo "| measure | $a | $b | ratio $a/$b (median of per-round ratios) | 95% interval |"
	echo "|---|---|---|---|---|"
	for m in lat bw; do
		name="osu_latency 8 B (µs)"
		[ $m = bw ] && name="osu_bw ${BW:-1048576} B (MB/s)"
		echo "| $name | $(median <"$w/$m.$a") | $(median <"$w/$m.$b") | $(ratios "$w/$m.$a" "$w/$m.$b" | median | decimals 3) | $(ratios "$w/$m.$a" "$w/$m.$b" | median_ci) |"
	done
}
