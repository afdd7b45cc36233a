//go:build linux

package pmi

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// SpawnCmd is one command of a spawn: N processes of Path with Args
// (not counting the program's name), and info keys for the launcher.
type SpawnCmd struct {
	Path string
	Args []string
	N    int
	Info map[string]string
}

// Spawn asks the launcher to start cmds as a new job (PMI-2's spawn;
// MPI_Comm_spawn_multiple's), whose key-value space holds preput before
// any of its processes starts. It returns the new job's id. PMI-1 has no
// spawn: the error matches ErrNoSpawn.
func (c *Client) Spawn(ctx context.Context, cmds []SpawnCmd, preput map[string]string) (string, error) {
	if !c.v2 {
		return "", fmt.Errorf("%w (the launcher speaks PMI-1)", ErrNoSpawn)
	}
	if len(cmds) == 0 {
		return "", fmt.Errorf("%w: spawn of no command", ErrProtocol)
	}
	req := msg{"spawn", []kv{{"ncmds", strconv.Itoa(len(cmds))}, {"preputcount", strconv.Itoa(len(preput))}}}
	i := 0
	for _, k := range sortedKeys(preput) {
		if err := checkKV(k, preput[k]); err != nil {
			return "", err
		}
		req.attrs = append(req.attrs, kv{"ppkey" + strconv.Itoa(i), k}, kv{"ppval" + strconv.Itoa(i), preput[k]})
		i++
	}
	for _, cmd := range cmds {
		if cmd.N < 1 || cmd.Path == "" {
			return "", fmt.Errorf("%w: spawn of %d processes of %q", ErrProtocol, cmd.N, cmd.Path)
		}
		req.attrs = append(req.attrs, kv{"subcmd", cmd.Path}, kv{"maxprocs", strconv.Itoa(cmd.N)}, kv{"argc", strconv.Itoa(len(cmd.Args))})
		for j, a := range cmd.Args {
			req.attrs = append(req.attrs, kv{"argv" + strconv.Itoa(j), a})
		}
		req.attrs = append(req.attrs, kv{"infokeycount", strconv.Itoa(len(cmd.Info))})
		for j, k := range sortedKeys(cmd.Info) {
			req.attrs = append(req.attrs, kv{"infokey" + strconv.Itoa(j), k}, kv{"infoval" + strconv.Itoa(j), cmd.Info[k]})
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.broken != nil {
		return "", c.broken
	}
	defer c.deadline(ctx)()
	resp, err := c.roundTrip(req, "spawn-response")
	if err = c.ioErr(ctx, "spawn", err); err != nil {
		return "", err
	}
	id, _ := resp.get("jobid")
	return id, nil
}

// Spawner is the id of the job that spawned this one (PMI-2's
// spawner-jobid), or "" for a job a launcher started.
func (c *Client) Spawner() string { return c.spawner }

// UniverseSize is how many processes the launcher says the job may
// usefully run, spawned ones included (PMI-2's universeSize job
// attribute: Hydra's -usize, rivetrun's -universe), or 0 if it does not
// say.
func (c *Client) UniverseSize(ctx context.Context) int {
	if !c.v2 {
		return 0
	}
	resp, err := c.call(ctx, "universeSize", msg{"info-getjobattr", []kv{{"key", UniverseKey}}}, "info-getjobattr-response", msg{}, "")
	if err != nil {
		return 0
	}
	if found, _ := resp.get("found"); found != "TRUE" {
		if strings.HasPrefix(c.jobid, "kvs_") {
			return c.hydraUniverse(ctx)
		}
		return 0
	}
	v, _ := resp.get("value")
	return count(v)
}

// count is v as a count, 0 if it is none.
func count(v string) int {
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return 0
	}
	return n
}

// hydraUniverse asks Hydra, whose job ids are its key-value spaces'
// names ("kvs_…"), for -usize: MPICH 4.0's Hydra serves no universeSize
// job attribute under PMI-2, but answers PMI-1's get_universe_size on the
// same connection (other PMI-2 servers are not asked: a line they do not
// parse could break the connection).
func (c *Client) hydraUniverse(ctx context.Context) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.broken != nil {
		return 0
	}
	defer c.deadline(ctx)()
	c.v2 = false
	resp, err := c.roundTrip(msg{cmd: "get_universe_size"}, "universe_size")
	c.v2 = true
	if err != nil {
		return 0
	}
	v, _ := resp.get("size")
	return count(v)
}

// UniverseKey is the job attribute of the universe size.
const UniverseKey = "universeSize"

// UniverseBaseKey is the preput key by which a spawning process names the
// world rank of the first process it spawns (package fabric sets it):
// rivetrun numbers the spawned processes from there in its output tags
// and failure notices, and refuses a spawn whose ranks are not the next
// free ones.
const UniverseBaseKey = "rivet-universe-base"

// ErrNoSpawn means the launcher cannot spawn processes.
var ErrNoSpawn = errors.New("pmi: the launcher does not spawn processes")

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
