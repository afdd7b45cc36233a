//go:build linux

// Slurm shows where Slurm placed a job's ranks and how Rivet connected
// them: each rank prints its Slurm node, the launcher's node index Rivet
// read (PMI_process_mapping, or SLURM_NODEID without PMI), the node Rivet
// found by kernel, and how it reaches every other rank; then the ranks
// check that they agree and sum their ranks. job.sbatch beside it is a
// batch script to copy.
//
//	srun --mpi=pmi2 -N2 -n4 ./slurm
//	sbatch examples/slurm/job.sbatch
package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/rivet-hpc/rivet/collectives"
	"github.com/rivet-hpc/rivet/fabric"
	"github.com/rivet-hpc/rivet/op"
)

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := run(ctx); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context) error {
	ep, err := fabric.Init(ctx)
	if err != nil {
		return err
	}
	defer ep.Close()
	w := ep.World()
	me, n := w.Rank(), w.Size()

	launch, ok := ep.LaunchNode(me)
	if !ok {
		return fmt.Errorf("rank %d: the launcher (%s) does not say where it placed the ranks", me, ep.Launcher())
	}
	// Slurm's own word for this task's node must be what Rivet read.
	if id := os.Getenv("SLURM_NODEID"); id != "" && id != strconv.Itoa(launch) {
		return fmt.Errorf("rank %d: SLURM_NODEID=%s, but Rivet read launch node %d", me, id, launch)
	}
	routes := make([]string, n)
	for r := range n {
		routes[r] = ep.Provider(r)
		// Ranks Slurm put on one node share its kernel.
		if l, _ := ep.LaunchNode(r); l == launch && ep.Node(r) != ep.Node(me) {
			return fmt.Errorf("rank %d: rank %d is on my Slurm node but not on my node", me, r)
		}
	}
	fmt.Printf("rank %d of %d: slurm node %s, launch node %d, node %d, routes %s\n",
		me, n, os.Getenv("SLURMD_NODENAME"), launch, ep.Node(me), strings.Join(routes, ","))

	sum := make([]int64, 1)
	if err := collectives.Allreduce(ctx, w, []int64{int64(me)}, sum, op.Sum[int64]()); err != nil {
		return err
	}
	if want := int64(n * (n - 1) / 2); sum[0] != want {
		return fmt.Errorf("rank %d: sum of ranks %d, want %d", me, sum[0], want)
	}
	if me == 0 {
		fmt.Printf("%d ranks via %s: sum of ranks %d\n", n, ep.Launcher(), sum[0])
	}
	return collectives.Barrier(ctx, w)
}
