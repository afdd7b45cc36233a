package pmix

import (
	"context"
	"fmt"
	"path/filepath"
)

// cmdSpawn is PMIx_Spawn's command.
const cmdSpawn = 9

// App is one application of a spawn (pmix_app_t): MaxProcs processes of
// Cmd with Argv (its first element the program's name), Env added to the
// environment the server gives them, in Cwd, with Info for the server.
type App struct {
	Cmd      string
	Argv     []string
	Env      []string
	Cwd      string
	MaxProcs int
	Info     []Info
}

// app packs an application as openpmix does: the command, the
// argument count (a generic int) and arguments, the environment's count
// (an int32) and strings, the working directory, the process count (a
// generic int), the number of infos (a size) and the infos.
func (e *encoder) app(a App) error {
	e.str(a.Cmd)
	e.varint(int64(len(a.Argv)))
	for _, s := range a.Argv {
		e.str(s)
	}
	e.varint(int64(len(a.Env)))
	for _, s := range a.Env {
		e.str(s)
	}
	e.str(a.Cwd)
	e.varint(int64(a.MaxProcs))
	e.uvarint(uint64(len(a.Info)))
	for _, in := range a.Info {
		if err := e.info(in); err != nil {
			return err
		}
	}
	return nil
}

// Spawn asks the server to start apps as a new job, with jobInfo for the
// whole job, and returns the new job's namespace. The server answers once
// the job is started, or with the status of its failure.
func (cl *Client) Spawn(ctx context.Context, jobInfo []Info, apps []App) (string, error) {
	e := newRequest(cmdSpawn)
	e.count(1)
	e.uvarint(uint64(len(jobInfo)))
	if len(jobInfo) > 0 {
		e.count(len(jobInfo))
		for _, in := range jobInfo {
			if err := e.info(in); err != nil {
				return "", err
			}
		}
	}
	e.count(1)
	e.uvarint(uint64(len(apps)))
	if len(apps) > 0 {
		e.count(len(apps))
		for _, a := range apps {
			if a.Cmd == "" || a.MaxProcs < 1 {
				return "", fmt.Errorf("pmix: spawn of %d processes of %q", a.MaxProcs, a.Cmd)
			}
			if len(a.Argv) == 0 {
				a.Argv = []string{filepath.Base(a.Cmd)}
			}
			if err := e.app(a); err != nil {
				return "", err
			}
		}
	}
	cl.mu.Lock()
	defer cl.mu.Unlock()
	p, err := cl.roundTrip(ctx, "spawn", e.b)
	if err != nil {
		return "", err
	}
	d := decoder{b: p}
	var st int32
	d.one("status", func() { st = d.int32() })
	if d.err == nil && st != 0 {
		return "", &StatusError{Op: "spawn", Status: st}
	}
	var ns string
	d.one("namespace", func() { ns = d.str() })
	if d.err != nil {
		return "", fmt.Errorf("pmix: spawn: %w", d.err)
	}
	return ns, nil
}
