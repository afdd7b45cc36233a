//go:build linux

package launch

import (
	"context"
	"fmt"
	"os/exec"
	"strconv"

	"github.com/rivet-hpc/rivet/internal/pmi"
)

// SpawnBaseKey is the preput key by which a spawning process proposes the
// world rank of the first process it spawns (pmi.UniverseBaseKey). The
// launcher numbers the spawned processes from the next rank free — its
// output tags and failure notices name them so — which is the one
// proposed unless processes the spawner did not know of (spawned but
// never joined) took it; the spawned job finds the number the launcher
// chose under the same key.
const SpawnBaseKey = pmi.UniverseBaseKey

// spawn serves a PMI-2 spawn request from a process of the job: the
// processes start as a job of their own (their own key-value space,
// which holds the request's preput keys), numbered after every process
// started so far, under the same options — output tags, -ft notices,
// binding. Their exits count like those of the job's own processes.
func (j *job) spawn(ctx context.Context, from int, req pmi.SpawnRequest) (string, error) {
	total := 0
	paths := make([]string, len(req.Cmds))
	for i, c := range req.Cmds {
		p, err := exec.LookPath(c.Path)
		if err != nil {
			return "", fmt.Errorf("rivetrun: spawn: %w", err)
		}
		paths[i] = p
		total += c.N
	}
	j.ftMu.Lock()
	next := len(j.procs)
	j.spawns++
	jobid := j.jobid + "-spawn" + strconv.Itoa(j.spawns)
	j.ftMu.Unlock()
	if v, ok := req.Preput[SpawnBaseKey]; ok {
		if b, err := strconv.Atoi(v); err != nil || b > next {
			return "", fmt.Errorf("rivetrun: spawn: the spawned processes would be ranks %s on, but the next free rank is %d", v, next)
		}
	}
	child := pmi.NewServer(total, jobid)
	child.SpawnerJobID = j.jobid
	child.Universe = j.Universe
	for k, v := range req.Preput {
		child.Preput(k, v)
	}
	if _, ok := req.Preput[SpawnBaseKey]; ok {
		child.Preput(SpawnBaseKey, strconv.Itoa(next))
	}
	// The main loop makes room for their exits first.
	select {
	case j.added <- total:
	case <-ctx.Done():
		return "", ctx.Err()
	}
	<-j.added
	r := 0
	var failed int
	for i, c := range req.Cmds {
		for range c.N {
			if failed != 0 {
				j.exits <- exit{rank: next + r, status: failed, never: true}
			} else if st := j.start(next+r, r, paths[i], append([]string{c.Path}, c.Args...), child); st != 0 {
				failed = st
				j.exits <- exit{rank: next + r, status: st, never: true}
			}
			r++
		}
	}
	if failed != 0 {
		return "", fmt.Errorf("rivetrun: spawn: a process could not start (status %d)", failed)
	}
	j.logf("rivetrun: rank %d spawned ranks %d to %d (job %s)\n", from, next, next+total-1, jobid)
	return jobid, nil
}
