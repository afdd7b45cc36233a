//go:build linux

package pmi

import (
	"context"
	"fmt"
	"strconv"
)

// SpawnRequest is a spawn a process asked its launcher for: the commands
// and the keys to put in the new job's key-value space before it starts.
type SpawnRequest struct {
	Cmds   []SpawnCmd
	Preput map[string]string
}

// Spawner starts the processes of a spawn request from rank and returns
// the new job's id; a launcher that serves spawn sets Server.Spawn to
// one.
type Spawner func(ctx context.Context, rank int, req SpawnRequest) (jobid string, err error)

// Preput puts key=value in the server's key-value space before any rank
// starts: the keys a spawn request carried.
func (s *Server) Preput(key, value string) {
	s.mu.Lock()
	s.kvs[key] = value
	s.mu.Unlock()
}

// parseSpawn reads a PMI-2 spawn request: the preput keys, then one
// segment per command, each starting at its subcmd.
func parseSpawn(m msg) (SpawnRequest, error) {
	req := SpawnRequest{Preput: map[string]string{}}
	atoi := func(k string, a []kv) (int, error) {
		for _, x := range a {
			if x.k == k {
				n, err := strconv.Atoi(x.v)
				if err != nil || n < 0 {
					return 0, fmt.Errorf("%w: spawn %s=%q", ErrProtocol, k, x.v)
				}
				return n, nil
			}
		}
		return 0, nil
	}
	var head []kv
	var segs [][]kv
	for _, a := range m.attrs {
		if a.k == "subcmd" {
			segs = append(segs, nil)
		}
		if len(segs) == 0 {
			head = append(head, a)
		} else {
			segs[len(segs)-1] = append(segs[len(segs)-1], a)
		}
	}
	ncmds, err := atoi("ncmds", head)
	if err != nil {
		return req, err
	}
	if ncmds != len(segs) || ncmds == 0 {
		return req, fmt.Errorf("%w: spawn of %d commands with %d subcmds", ErrProtocol, ncmds, len(segs))
	}
	npre, err := atoi("preputcount", head)
	if err != nil {
		return req, err
	}
	get := func(k string, a []kv) (string, bool) { return msg{attrs: a}.get(k) }
	for i := range npre {
		k, ok1 := get("ppkey"+strconv.Itoa(i), head)
		v, ok2 := get("ppval"+strconv.Itoa(i), head)
		if !ok1 || !ok2 {
			return req, fmt.Errorf("%w: spawn preput %d missing", ErrProtocol, i)
		}
		req.Preput[k] = v
	}
	for _, seg := range segs {
		var c SpawnCmd
		c.Path, _ = get("subcmd", seg)
		if c.N, err = atoi("maxprocs", seg); err != nil {
			return req, err
		}
		argc, err := atoi("argc", seg)
		if err != nil {
			return req, err
		}
		for i := range argc {
			a, ok := get("argv"+strconv.Itoa(i), seg)
			if !ok {
				return req, fmt.Errorf("%w: spawn argv%d missing", ErrProtocol, i)
			}
			c.Args = append(c.Args, a)
		}
		ninfo, err := atoi("infokeycount", seg)
		if err != nil {
			return req, err
		}
		for i := range ninfo {
			k, ok1 := get("infokey"+strconv.Itoa(i), seg)
			v, ok2 := get("infoval"+strconv.Itoa(i), seg)
			if !ok1 || !ok2 {
				return req, fmt.Errorf("%w: spawn info %d missing", ErrProtocol, i)
			}
			if c.Info == nil {
				c.Info = map[string]string{}
			}
			c.Info[k] = v
		}
		if c.Path == "" || c.N < 1 {
			return req, fmt.Errorf("%w: spawn of %d processes of %q", ErrProtocol, c.N, c.Path)
		}
		req.Cmds = append(req.Cmds, c)
	}
	return req, nil
}

// spawn answers a spawn request.
func (s *Server) spawn(ctx context.Context, rank int, m msg) msg {
	req, err := parseSpawn(m)
	if err != nil {
		return fail("spawn-response", err.Error())
	}
	if s.Spawn == nil {
		return fail("spawn-response", ErrNoSpawn.Error())
	}
	id, err := s.Spawn(ctx, rank, req)
	if err != nil {
		return fail("spawn-response", err.Error())
	}
	return ok("spawn-response", kv{"jobid", id}, kv{"nerrs", "0"})
}
