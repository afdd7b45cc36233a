package ulfm

// Quorum counts the nodes of nodeOf (each rank's node, numbered from 0
// in the order of their lowest rank, so node 0 holds rank 0; -1 for a
// rank not in the job yet) that still have a rank not failed, and
// reports whether they are a quorum as process me (never failed in its
// own view) sees it: a strict majority of the nodes, or exactly half
// with node 0 among them. A process that sees no quorum cannot tell
// whether the others failed or it was cut off from them, and must end
// itself, so that a partition leaves one side going on, not two.
func Quorum(nodeOf []int, me int, failed func(int) bool) (seen, nodes int, ok bool) {
	var alive []bool
	for w, n := range nodeOf {
		if n < 0 {
			continue // not (yet) in the universe
		}
		for n >= len(alive) {
			alive = append(alive, false)
		}
		if w == me || !failed(w) {
			alive[n] = true
		}
	}
	for _, a := range alive {
		if a {
			seen++
		}
	}
	nodes = len(alive)
	return seen, nodes, 2*seen > nodes || 2*seen == nodes && alive[0]
}
