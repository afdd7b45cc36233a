package testutil

import (
	"os"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// ThreadCPUs lists the distinct CPU masks of this process's threads, each
// as a comma-separated list of CPUs ("0,1"), sorted.
func ThreadCPUs() []string {
	tasks, _ := os.ReadDir("/proc/self/task")
	var masks []string
	for _, t := range tasks {
		tid, err := strconv.Atoi(t.Name())
		if err != nil {
			continue
		}
		var set unix.CPUSet
		if unix.SchedGetaffinity(tid, &set) != nil {
			continue // the thread has gone
		}
		var on []string
		for c := 0; c < len(set)*64; c++ {
			if set.IsSet(c) {
				on = append(on, strconv.Itoa(c))
			}
		}
		if m := strings.Join(on, ","); !slices.Contains(masks, m) {
			masks = append(masks, m)
		}
	}
	slices.Sort(masks)
	return masks
}
